#!/bin/bash
# usage: bisect.sh VARIANT N ; VARIANT: base | nosgemm | nokeep
cd /work/main/build-cpu/tests
v=$1; n=$2; fails=0
for i in $(seq 1 $n); do
  case $v in base) e="";; nosgemm) e="TANDEM_X_NO_SGEMM=1";; nokeep) e="TANDEM_X_NO_KEEP=1";; esac
  env $e HYDRA_LAUNCHER=fork TANDEM_TEST_BINARY_DIR=/work/main/build-cpu timeout 120 ./test_preemption -tc="train_encoder: SIGTERM*" > /tmp/bis_${v}_${TAG}_$i.log 2>&1
  if grep -q "corrupted\|Aborted\|signal 6" /tmp/bis_${v}_${TAG}_$i.log; then fails=$((fails+1)); fi
done
echo "$v: $fails corrupted of $n"
