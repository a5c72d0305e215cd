import sys, argparse
sys.path.insert(0, '/work/main/apps/scripts/study')
import links, grid, subprocess, os
a = argparse.Namespace(models='bert_small', strategies='zero3', rates='10gbit', hosts=2, ranks_per_host=1, batch=8,
                       encoder_batch=4, image_size=32, seq_len=32, steps=12, build='/work/main/build-cpu',
                       out='/tmp/b3trace', predict_only=False, copy_per_host=0)
L = links.Links(a)
for s in ['zero3', 'ddp']:
    cmd = L.runner.command('bert_small', s, 2, 4, f'{s}_traced', trace=True)
    cmd, env = cmd[3:], dict(os.environ)
    while cmd[0] == '-env':
        env[cmd[1]] = cmd[2]; cmd = cmd[3:]
    pre = ['bash', L.cluster, '--hosts', '2', '--ranks-per-host', '1', '--rate', '10gbit']
    print(subprocess.call(pre + ['--'] + cmd, stdout=open(f'/tmp/b3trace/{s}.log','w'), stderr=subprocess.STDOUT, env=env))
L.local('bert_small', 'one_traced', trace=True)
