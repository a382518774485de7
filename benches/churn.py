#!/usr/bin/env python3
import os, sys, time, re
# churn.py DIR RATE SECONDS: rewrite endpoints.yaml RATE times a second (one CLA's port each
# time, cycling), written aside and renamed, for SECONDS.
d, rate, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
p = os.path.join(d, 'endpoints.yaml')
text = open(p).read()
start = time.time(); n = 0
while time.time() - start < secs:
    n += 1
    i = n % 100
    # the i-th CLA's three endpoints move to port 20000 + n % 1000
    blocks = text.split('  - cluster_name: ')
    blocks[i + 1] = re.sub(r'port_value: \d+', f'port_value: {20000 + n % 1000}', blocks[i + 1])
    text = '  - cluster_name: '.join(blocks)
    tmp = os.path.join(d, '.endpoints.tmp'); open(tmp, 'w').write(text); os.replace(tmp, p)
    next_at = start + n / rate
    time.sleep(max(0, next_at - time.time()))
print(n, file=sys.stderr)
