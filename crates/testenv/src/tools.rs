//! Where the binaries installed by `scripts/install-test-tools` live.

use std::path::PathBuf;

use crate::process::Error;

/// `$BLOCKWORK_TOOLS_DIR/bin/<name>` (default `~/.cache/blockwork-tools/bin/<name>`).
pub(crate) fn tool(name: &str) -> Result<PathBuf, Error> {
    let dir = match std::env::var_os("BLOCKWORK_TOOLS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
            home.join(".cache/blockwork-tools")
        }
    };
    let path = dir.join("bin").join(name);
    if path.exists() { Ok(path) } else { Err(Error::MissingTool { name: name.to_owned(), path }) }
}

/// A free TCP port on 127.0.0.1 (the OS picks; the listener is closed before returning).
pub(crate) fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::Io)?;
    Ok(listener.local_addr().map_err(Error::Io)?.port())
}
