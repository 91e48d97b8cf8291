//! The tool speaks no wire protocol of its own: no Lua, no script call,
//! no key or channel name. What it shows and frees is read, named and sent
//! by the library (`leasehold::inspect`, `LockObject::force_unlock`,
//! `client_records`, `deadlocks_on`, `Client::doctor_with`), so it cannot
//! fall behind it (it once did: its own fair-lock unlock handed nothing
//! over). This file checks the others' source text.

/// What a wire protocol written here would contain: a script, a raw
/// command, or a key or channel name of the lock family.
const PROTOCOL: &[&str] = &[
    "redis.call",
    "redis.pcall",
    "EVAL",
    "SCRIPT LOAD",
    ".custom(",
    "CustomCommand",
    "\"redisson_",
    "\"leasehold_",
    "\"leasehold:client",
    "\"leasehold:doctor",
    "\"{{{",
    ":timeout\"",
];

#[test]
fn the_tool_names_no_key_and_sends_no_script() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut read = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("own_protocol.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        for (n, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for needle in PROTOCOL {
                assert!(
                    !code.contains(needle),
                    "{}:{}: `{needle}` in the tool's own code: {line}",
                    path.display(),
                    n + 1
                );
            }
        }
        read += 1;
    }
    assert!(read >= 3, "read {read} source files of the tool");
}
