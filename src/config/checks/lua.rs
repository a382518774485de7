//! Lua scripts given inline, compiled (and not run) by LuaJIT as Envoy 1.40 compiles them
//! when it builds the Lua filter or a route's Lua config (`luaL_dostring`: "script load
//! error: [string \"...\"]:1: '<eof>' expected near 'end'"). A script that compiles and
//! fails only when run (an `error()` at its top level) is Envoy's alone: running it here
//! would run the operator's code in the control plane.
//!
//! Owns: that verdict, with LuaJIT's own words. Must not: run a script.

use prost_reflect::DynamicMessage;

use super::memo::Memo;
use super::refusal::{beyond, refuse, Refusal};
use crate::config::fields::{has, inline_data, message as field, string};

/// The Lua filter's sources: `inline_code`, `default_source_code` and each named source.
pub(super) fn filter(config: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    if has(config, "inline_code") {
        compiled(
            string(config, "inline_code").as_bytes(),
            &beyond(at, &["inline_code"]),
        )?;
    }
    if let Some(bytes) = field(config, "default_source_code").and_then(|s| inline_data(&s)) {
        compiled(&bytes, &beyond(at, &["default_source_code"]))?;
    }
    if let Some(map) = config
        .get_field_by_name("source_codes")
        .and_then(|v| v.as_map().cloned())
    {
        let mut named: Vec<_> = map.into_iter().collect();
        named.sort_by_key(|(key, _)| format!("{key:?}"));
        for (key, value) in named {
            let (prost_reflect::MapKey::String(name), Some(source)) = (key, value.as_message())
            else {
                continue;
            };
            if let Some(bytes) = inline_data(source) {
                compiled(
                    &bytes,
                    &beyond(at, &["source_codes", &format!("[{name:?}]")]),
                )?;
            }
        }
    }
    Ok(())
}

/// A route's `LuaPerRoute` source.
pub(super) fn per_route(config: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    match field(config, "source_code").and_then(|s| inline_data(&s)) {
        Some(bytes) => compiled(&bytes, &beyond(at, &["source_code"])),
        None => Ok(()),
    }
}

fn compiled(source: &[u8], at: &[String]) -> Result<(), Refusal> {
    match compile(source) {
        Ok(()) => Ok(()),
        Err(words) => refuse(at, format!("script load error: {words}")),
    }
}

/// LuaJIT's verdict on a script, compiled as `luaL_loadstring` compiles it (the script its
/// own chunk name, so errors read `[string "..."]:LINE: ...`): `Err` with LuaJIT's message.
/// A script with a NUL byte in it (which `luaL_loadstring` stops at) is not judged.
pub fn compile(source: &[u8]) -> Result<(), String> {
    // A script is often the same on every route: compiled once (`memo`).
    static COMPILED: Memo<Result<(), String>> = Memo::new();
    COMPILED.get(&[source], || compile_now(source))
}

fn compile_now(source: &[u8]) -> Result<(), String> {
    if source.contains(&0) {
        return Ok(());
    }
    // No library is opened: compiling needs none, and nothing here runs.
    let Ok(lua) = mlua::Lua::new_with(mlua::StdLib::NONE, mlua::LuaOptions::default()) else {
        return Ok(());
    };
    let name = String::from_utf8_lossy(source).into_owned();
    match lua.load(source).set_name(name).into_function() {
        Ok(_) => Ok(()),
        Err(mlua::Error::SyntaxError { message, .. }) => Err(message),
        // Out of memory, or the like: not a verdict on the script.
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::compile;

    #[test]
    fn luajit_compiles_without_running() {
        assert_eq!(compile(b"function envoy_on_request(h) end"), Ok(()));
        // Compiles; only running it fails.
        assert_eq!(compile(b"error('boom')"), Ok(()));
        let words = compile(b"function envoy_on_request(h) end end").unwrap_err();
        assert!(
            words.starts_with("[string \"function envoy_on_request(h) end end\"]:1:"),
            "{words}"
        );
        // Lua 5.3's integer division is not LuaJIT's.
        assert!(compile(b"local a = 7 // 2").is_err());
    }
}
