//! Envoy's reading of YAML scalars and keys; tests/json_envoy.rs holds them against Envoy.

use super::*;

fn value(text: &str) -> Value {
    parse(text).expect("parses").0
}

#[test]
fn plain_scalars_resolve_as_envoy_reads_them() {
    let v = value(
        "a: yes\nb: No\nc: on\nd: OFF\ne: y\nf: true\ng: 42\nh: -7\ni: 0x10\nj: 1.5\nk: 1e3\n\
         l: ~\nm:\nn: 12345678901\no: hello\np: .inf\nq: 2147483647\nr: 2147483648\ns: 010\n",
    );
    let get = |k: &str| v.get(k).cloned().unwrap();
    assert_eq!(get("a"), Value::Bool(true));
    assert_eq!(get("b"), Value::Bool(false));
    assert_eq!(get("c"), Value::Bool(true));
    assert_eq!(get("d"), Value::Bool(false));
    assert_eq!(get("e"), Value::Bool(true));
    assert_eq!(get("f"), Value::Bool(true));
    assert_eq!(get("g"), Value::from(42));
    assert_eq!(get("h"), Value::from(-7));
    assert_eq!(get("i"), Value::from(16));
    assert_eq!(get("j"), Value::from(1.5));
    assert_eq!(get("k"), Value::from(1000.0));
    assert_eq!(get("l"), Value::Null);
    assert_eq!(get("m"), Value::Null);
    // Beyond 32 bits Envoy keeps the text (a string field takes it; an integer field too).
    assert_eq!(get("n"), Value::from("12345678901"));
    assert_eq!(get("o"), Value::from("hello"));
    assert!(get("p").as_f64().unwrap().is_infinite());
    assert_eq!(get("q"), Value::from(2147483647));
    assert_eq!(get("r"), Value::from("2147483648"));
    assert_eq!(get("s"), Value::from(10));
}

#[test]
fn quoted_scalars_are_strings() {
    let v = value("a: 'yes'\nb: \"42\"\nc: |\n  on\nd: !!str 7\n");
    assert_eq!(v.get("a").unwrap(), &Value::from("yes"));
    assert_eq!(v.get("b").unwrap(), &Value::from("42"));
    assert_eq!(v.get("c").unwrap(), &Value::from("on\n"));
    assert_eq!(v.get("d").unwrap(), &Value::from("7"));
}

#[test]
fn a_key_given_twice_keeps_the_last_and_names_both_lines() {
    let (v, duplicates) = parse("clusters:\n- name: a\n  type: STATIC\n  name: b\n").unwrap();
    assert_eq!(v["clusters"][0]["name"], Value::from("b"));
    assert_eq!(
        duplicates,
        vec![DuplicateKey {
            key: "name".into(),
            first_line: 2,
            second_line: 4
        }]
    );
}

#[test]
fn anchors_and_aliases_expand_within_a_limit() {
    let v = value("base: &b {x: 1}\nuse: *b\n");
    assert_eq!(v["use"]["x"], Value::from(1));
    // Nine levels of ten aliases each: 10^9 nodes.
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("aliases expand to more than"), "{err}");
}

#[test]
fn syntax_errors_name_the_line_and_more_than_one_document_is_refused() {
    let err = parse("a: [1, 2\nb: 3\n").unwrap_err().to_string();
    assert!(err.contains("line"), "{err}");
    let err = parse("a: 1\n---\nb: 2\n").unwrap_err().to_string();
    assert!(err.contains("more than one YAML document"), "{err}");
    let err = parse("? [a, b]\n: 1\n").unwrap_err().to_string();
    assert!(err.contains("mapping key"), "{err}");
}
