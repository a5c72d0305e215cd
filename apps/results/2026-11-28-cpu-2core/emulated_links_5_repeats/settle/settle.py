import sys, os, time, json, argparse
sys.path.insert(0, '/work/main/apps/scripts/study')
import links
a = argparse.Namespace(models='resnet50', strategies='ddp', rates='10gbit', hosts=2, ranks_per_host=1, batch=8,
                       encoder_batch=4, image_size=32, seq_len=32, steps=12, build='/work/main/build-cpu',
                       out='/tmp/settle_out', predict_only=False, copy_per_host=0)
L = links.Links(a)
res = []
def comp(tag):
    m = L.local('resnet50', tag)
    res.append((tag, round(m['ms_per_step'], 1))); print(res[-1], flush=True)
for i in range(3):
    comp(f'alone{i}')
for i in range(3):
    L.emulated('resnet50', 'ddp', '10gbit', f'cell_b{i}')
    comp(f'after_cell{i}')
    L.emulated('resnet50', 'ddp', '10gbit', f'cell_c{i}')
    time.sleep(10)
    comp(f'after_cell_10s{i}')
json.dump(res, open('/tmp/settle_out/res.json', 'w'))
