#!/usr/bin/env python3
# The reference snapshot of docs/benchmarks.md ("Fleet scale"): 100 EDS clusters x 3
# endpoints, 10 HTTP listeners (RDS), 10 route configurations, written aside and renamed.
#   benches/reference-snapshot.py DIR ENDPOINT_PORT CLUSTER_TIMEOUT
import sys, os

d, base, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(d, exist_ok=True)
c = ['clusters:'] + [f'  - {{ name: c{i}, connect_timeout: {timeout}, type: EDS, eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }} }}' for i in range(100)]
e = ['endpoints:'] + [f'  - cluster_name: c{i}\n    endpoints: [{{ lb_endpoints: [' + ', '.join(f'{{ endpoint: {{ address: {{ socket_address: {{ address: 10.0.{i}.{j}, port_value: {base} }} }} }} }}' for j in range(3)) + '] }]' for i in range(100)]
r = ['routes:'] + [f'  - name: r{i}\n    virtual_hosts: [{{ name: vh{i}, domains: ["*"], routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: c{i*10} }} }}] }}]' for i in range(10)]
l = ['listeners:'] + [f'''  - name: l{i}
    address: {{ socket_address: {{ address: 0.0.0.0, port_value: {10000+i} }} }}
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: l{i}
              rds: {{ route_config_name: r{i}, config_source: {{ ads: {{}} }} }}
              http_filters: [{{ name: envoy.filters.http.router, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }} }}]''' for i in range(10)]
for name, lines in [('clusters.yaml', c), ('endpoints.yaml', e), ('routes.yaml', r), ('listeners.yaml', l)]:
    tmp = os.path.join(d, '.' + name + '.tmp')
    open(tmp, 'w').write('\n'.join(lines) + '\n')
    os.replace(tmp, os.path.join(d, name))
