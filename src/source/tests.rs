use super::*;

#[test]
fn an_etcd_url_names_members_and_a_prefix() {
    let url: EtcdUrl = "etcd://10.0.0.1:2379,etcd-1.example:2379/switchyard"
        .parse()
        .expect("parses");
    assert_eq!(url.endpoints, ["10.0.0.1:2379", "etcd-1.example:2379"]);
    assert_eq!(url.key_prefix(), "/switchyard/");
    assert_eq!(
        url.display(),
        "etcd://10.0.0.1:2379,etcd-1.example:2379/switchyard"
    );
    let nested: EtcdUrl = "etcd://127.0.0.1:2379/envoy/edge/".parse().expect("parses");
    assert_eq!(nested.key_prefix(), "/envoy/edge/");
    for (url, words) in [
        ("http://127.0.0.1:2379/x", "not an etcd URL"),
        ("etcd://127.0.0.1:2379", "no key prefix"),
        ("etcd://127.0.0.1:2379/", "no key prefix"),
        ("etcd://127.0.0.1/x", "has no port"),
        ("etcd://:2379/x", "has no host"),
        ("etcd://127.0.0.1:0/x", "is not a port"),
        ("etcd://127.0.0.1:99999/x", "is not a port"),
        ("etcd://a:1,b/x", "member \"b\" has no port"),
    ] {
        let err = url.parse::<EtcdUrl>().expect_err(url).to_string();
        assert!(
            err.starts_with(&format!("--source {url}: ")) && err.contains(words),
            "{url}: {err}"
        );
    }
}
