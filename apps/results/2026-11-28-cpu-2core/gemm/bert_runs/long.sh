export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
out=${OUT:-long}; mkdir -p $out
for i in 1 2 3; do for which in before after; do
  bin=${BEFORE:?main binary}; [ $which = after ] && bin=${AFTER:?branch binary}
  /usr/bin/time -f "user %U sys %S wall %e" -o $out/${which}_$i.time $bin --synthetic --device cpu --model bert_small --seq-len 128 --batch 8 --steps 14 --bench-warmup 2 --amp off --val-batches 1 --metrics $out/${which}_$i.json > $out/${which}_$i.log 2>&1
  echo "$which $i steps 14 $(python3 -c "import json; d=json.load(open('$out/${which}_$i.json')); print(d.get('tokens_per_s') or d['throughput']['tokens_per_s'])") $(cat $out/${which}_$i.time) load $(cut -d' ' -f1 /proc/loadavg)"
done; done
