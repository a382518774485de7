use super::*;

#[test]
fn census_prints() {
    let c = census();
    eprintln!("messages {} fields {}", c.messages, c.fields);
    for (k, v) in &c.rules {
        eprintln!("{k}: {v}  e.g. {}", c.example[k]);
    }
    eprintln!("unevaluated {:?}", c.unevaluated);
}
