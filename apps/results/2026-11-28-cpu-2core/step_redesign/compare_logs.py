# The main job's log lines, timings left out (the rest of each progress line after its lr), paths and
# run ids normalised; prints a unified diff of what is left and the line counts.
import re,sys
def norm(p):
    out=[]
    for l in open(p):
        l=l.rstrip('\n')
        l=re.sub(r'/tmp/mj/\w+','DIR',l)
        l=re.sub(r'[0-9a-f]{32}','RUNID',l)
        if ' img/s' in l and '| lr' in l: l=l[:l.index(' img/s')].rsplit('|',1)[0]
        out.append(l)
    return out
a,b=norm(sys.argv[1]),norm(sys.argv[2])
import difflib
d=[x for x in difflib.unified_diff(a,b,lineterm='',n=0)]
print('\n'.join(d[:80])); print(len(a),len(b),'diff lines',len(d))
