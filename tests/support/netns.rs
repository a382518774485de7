//! A network namespace of the test's own, joined to this host's by a veth pair, so that a
//! process inside it can be cut from a server outside it (the link set down: packets lost,
//! no reset, as a partition does) while it keeps running and serving what is inside.
//!
//! The namespace and the pair are made by `ip` (Debian's iproute2; the tests run as root)
//! and removed on drop. The pair's two addresses are on a /30 of 10.234.0.0/16 that only
//! this host routes: the host's side for a server the inside reaches (etcd listens on it
//! beside 127.0.0.1), the inside's side unused by the tests. Inside, 127.0.0.1 is the
//! namespace's own loopback: processes started inside listen there, and are reached from
//! inside ([`Netns::within`]).

use std::fs::File;
use std::os::fd::AsFd;
use std::process::Command;

use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

pub struct Netns {
    name: String,
    host_side: String,
    /// The host's address on the pair (what the inside reaches).
    pub host_addr: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e} (Debian's iproute2)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// A namespace and its pair, up. Panics, saying why, if they cannot be made (not root,
    /// no `ip`): a test of a partition cannot run without them.
    pub fn make() -> Netns {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = std::process::id() % 10_000;
        let name = format!("sy{id}n{n}");
        let host_side = format!("syh{id}n{n}");
        let inside = format!("syi{id}n{n}");
        // A /30 per namespace: 64 per process, from the pid's offset.
        let block = (id % 250) * 64 + n % 64;
        let (a, b) = (block / 64, (block % 64) * 4);
        let host_addr = format!("10.234.{a}.{}", b + 1);
        let inside_addr = format!("10.234.{a}.{}", b + 2);
        let _ = ip(&["netns", "del", &name]);
        let _ = ip(&["link", "del", &host_side]);
        let made = (|| {
            ip(&["netns", "add", &name])?;
            ip(&[
                "link", "add", &host_side, "type", "veth", "peer", "name", &inside,
            ])?;
            ip(&["link", "set", &inside, "netns", &name])?;
            ip(&["addr", "add", &format!("{host_addr}/30"), "dev", &host_side])?;
            ip(&["link", "set", &host_side, "up"])?;
            let exec = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &name, "ip"];
                all.extend_from_slice(args);
                ip(&all)
            };
            exec(&["addr", "add", &format!("{inside_addr}/30"), "dev", &inside])?;
            exec(&["link", "set", &inside, "up"])?;
            exec(&["link", "set", "lo", "up"])
        })();
        let netns = Netns {
            name,
            host_side,
            host_addr,
        };
        if let Err(e) = made {
            panic!("cannot make a network namespace for the partition: {e}");
        }
        netns
    }

    /// Cut the link: nothing passes either way, and nothing says so (no reset).
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_side, "down"]).expect("the link set down");
    }

    /// Mend the link.
    pub fn mend(&self) {
        ip(&["link", "set", &self.host_side, "up"]).expect("the link set up");
    }

    /// Run `f` on a thread of its own inside the namespace: the sockets it opens and the
    /// processes it starts are inside (a process keeps the namespace it was started in).
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
                    .unwrap_or_else(|e| panic!("cannot enter {path}: {e}"));
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// [`Netns::within`] for async work, on a runtime of its own inside the namespace (the
    /// caller's worker thread waits meanwhile).
    pub fn within_async<T: Send, F: std::future::Future<Output = T>>(
        &self,
        f: impl FnOnce() -> F + Send,
    ) -> T {
        let run = || {
            self.within(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime inside the namespace")
                    .block_on(f())
            })
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(run)
        } else {
            run()
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_side]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
