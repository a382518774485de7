#!/usr/bin/env python3
# A large snapshot for load figures (docs/benchmarks.md): FILES files of PER_FILE EDS clusters
# each, with their ClusterLoadAssignments (2 endpoints each).
#   benches/big-snapshot.py DIR FILES PER_FILE
import os, sys

d, files, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
for f in range(files):
    lines = ['clusters:']
    for i in range(per):
        n = f * per + i
        lines.append(f'  - {{ name: c{n}, connect_timeout: 1s, type: EDS, eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }} }}')
    lines.append('endpoints:')
    for i in range(per):
        n = f * per + i
        eps = ', '.join(f'{{ endpoint: {{ address: {{ socket_address: {{ address: 10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}, port_value: {8080 + j} }} }} }} }}' for j in range(2))
        lines.append(f'  - cluster_name: c{n}\n    endpoints: [{{ lb_endpoints: [{eps}] }}]')
    tmp = os.path.join(d, f'.f{f:03}.tmp')
    with open(tmp, 'w') as out:
        out.write('\n'.join(lines) + '\n')
    os.replace(tmp, os.path.join(d, f'f{f:03}.yaml'))
