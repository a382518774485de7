#!/usr/bin/env python3
import sys, os
# gen.py DIR ROUTES: one listener, one route configuration of ROUTES routes over 50 EDS clusters.
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
c = ['clusters:'] + [f'  - {{ name: svc{i}, connect_timeout: 1s, type: EDS, eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }} }}' for i in range(50)]
c += ['endpoints:'] + [f'  - cluster_name: svc{i}\n    endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 10.2.0.{i}, port_value: 8080 }} }} }} }}] }}]' for i in range(50)]
r = ['routes:', '  - name: gateway', '    virtual_hosts:', '      - name: all', '        domains: ["*"]', '        routes:']
r += [f'          - {{ match: {{ prefix: "/api/v1/service-{i}/" }}, route: {{ cluster: svc{i % 50} }} }}' for i in range(n)]
l = '''listeners:
  - name: gateway
    address: { socket_address: { address: 0.0.0.0, port_value: 10000 } }
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: gateway
              rds: { route_config_name: gateway, config_source: { ads: {} } }
              http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }]
'''
for name, text in [('clusters.yaml', '\n'.join(c) + '\n'), ('routes.yaml', '\n'.join(r) + '\n'), ('listeners.yaml', l)]:
    tmp = os.path.join(d, '.' + name + '.tmp'); open(tmp, 'w').write(text); os.replace(tmp, os.path.join(d, name))
