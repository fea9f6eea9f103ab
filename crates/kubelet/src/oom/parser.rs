//! Kernel OOM messages to OOM kills, as cadvisor's `utils/oomparser` reads them (what upstream's
//! OOM watcher streams): an OOM starts at `invoked oom-killer:`, and ends at the first line that
//! names the victim, either the `oom-kill:constraint=...,oom_memcg=...,task_memcg=...,task=...,
//! pid=...,uid=...` summary (kernels 5.0+) or `Killed process N (name)`. The legacy
//! `Task in X killed as a result of limit of Y` line only names the cgroups. Pure.

/// One OOM kill (cadvisor `OomInstance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomInstance {
    pub pid: u32,
    pub process_name: String,
    /// The cgroup of the killed task (cadvisor `ContainerName`).
    pub container_name: String,
    /// The cgroup whose limit was hit (cadvisor `VictimContainerName`): `/` for a system-wide
    /// OOM (the kernel prints `global_oom` there instead of `oom_memcg=`, which leaves the
    /// default in place, as in cadvisor).
    pub victim_container_name: String,
    pub constraint: String,
}

impl OomInstance {
    fn new() -> Self {
        OomInstance {
            pid: 0,
            process_name: String::new(),
            container_name: "/".into(),
            victim_container_name: "/".into(),
            constraint: String::new(),
        }
    }

    /// Upstream's watcher records an event only when the victim container is `/`.
    pub fn is_system_oom(&self) -> bool {
        self.victim_container_name == "/"
    }

    /// Upstream's `SystemOOM` event message.
    pub fn event_message(&self) -> String {
        let mut m = String::from("System OOM encountered");
        if !self.process_name.is_empty() && self.pid != 0 {
            m.push_str(&format!(
                ", victim process: {}, pid: {}",
                self.process_name, self.pid
            ));
        }
        m
    }
}

/// Feeds kernel messages one at a time; yields an instance when one is complete.
#[derive(Debug, Default)]
pub struct OomParser {
    current: Option<OomInstance>,
}

impl OomParser {
    pub fn feed(&mut self, message: &str) -> Option<OomInstance> {
        let Some(cur) = &mut self.current else {
            if message.contains("invoked oom-killer:") {
                self.current = Some(OomInstance::new());
            }
            return None;
        };
        let finished = summary_line(message, cur) || {
            legacy_line(message, cur);
            killed_line(message, cur)
        };
        if finished {
            self.current.take()
        } else {
            None
        }
    }
}

/// `oom-kill:constraint=C,nodemask=N,cpuset=S,mems_allowed=M,oom_memcg=V,task_memcg=T,task=P,
/// pid=I,uid=U`, matched as cadvisor's greedy regular expression does (each field up to the
/// last occurrence of the next key).
fn summary_line(line: &str, cur: &mut OomInstance) -> bool {
    let Some(start) = line.find("oom-kill:constraint=") else {
        return false;
    };
    let rest = &line[start + "oom-kill:constraint=".len()..];
    let keys = [
        ",nodemask=",
        ",cpuset=",
        ",mems_allowed=",
        ",oom_memcg=",
        ",task_memcg=",
        ",task=",
        ",pid=",
        ",uid=",
    ];
    // Split from the end: the last ",uid=", the last ",pid=" before it, and so on.
    let mut fields = vec![""; keys.len() + 1];
    let mut end = rest.len();
    for (i, key) in keys.iter().enumerate().rev() {
        let Some(pos) = rest[..end].rfind(key) else {
            return false;
        };
        fields[i + 1] = &rest[pos + key.len()..end];
        end = pos;
    }
    fields[0] = &rest[..end];
    let Ok(pid) = fields[7].trim().parse::<u32>() else {
        return false;
    };
    cur.constraint = fields[0].to_string();
    cur.victim_container_name = fields[4].to_string();
    cur.container_name = fields[5].to_string();
    cur.process_name = fields[6].to_string();
    cur.pid = pid;
    true
}

/// `Task in X killed as a result of limit of Y` (kernels before 5.0): names only.
fn legacy_line(line: &str, cur: &mut OomInstance) {
    let Some(start) = line.find("Task in ") else {
        return;
    };
    let rest = &line[start + "Task in ".len()..];
    let Some((task, limit)) = rest.rsplit_once(" killed as a result of limit of ") else {
        return;
    };
    cur.container_name = join_root(task);
    cur.victim_container_name = join_root(limit);
}

/// `Killed process N (name)`.
fn killed_line(line: &str, cur: &mut OomInstance) -> bool {
    let Some(start) = line.find("Killed process ") else {
        return false;
    };
    let rest = &line[start + "Killed process ".len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let Ok(pid) = rest[..digits].parse::<u32>() else {
        return false;
    };
    let after = &rest[digits..];
    let (Some(open), Some(close)) = (after.strip_prefix(" ("), after.rfind(')')) else {
        return false;
    };
    let name_end = close.saturating_sub(2);
    if name_end == 0 {
        return false;
    }
    cur.pid = pid;
    cur.process_name = open[..name_end].to_string();
    true
}

/// Go's `path.Join("/", p)`.
fn join_root(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

/// The message of one `/dev/kmsg` record: `prio,seq,ts,flags[,..];message` then continuation
/// lines (` KEY=value`), which are not part of it. Escapes stay as the kernel wrote them.
pub fn kmsg_message(record: &str) -> Option<&str> {
    let (_, rest) = record.split_once(';')?;
    Some(rest.split('\n').next().unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> Vec<OomInstance> {
        let mut p = OomParser::default();
        lines.iter().filter_map(|l| p.feed(l)).collect()
    }

    #[test]
    fn memcg_oom_on_a_5x_kernel_names_the_limit_cgroup() {
        let got = run(&[
            "tail invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
            "CPU: 1 PID: 4242 Comm: tail Not tainted 6.1.0",
            "memory: usage 8192kB, limit 8192kB, failcnt 30",
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/rkt-234-1/oom,task_memcg=/rkt-234-1/oom,task=tail,pid=4242,uid=0",
            "Memory cgroup out of memory: Killed process 4242 (tail) total-vm:10000kB, anon-rss:8000kB",
        ]);
        assert_eq!(got.len(), 1);
        let o = &got[0];
        assert_eq!(o.victim_container_name, "/rkt-234-1/oom");
        assert_eq!(o.container_name, "/rkt-234-1/oom");
        assert_eq!((o.pid, o.process_name.as_str()), (4242, "tail"));
        assert_eq!(o.constraint, "CONSTRAINT_MEMCG");
        assert!(!o.is_system_oom());
    }

    #[test]
    fn global_oom_is_a_system_oom_named_by_the_killed_line() {
        let got = run(&[
            "stress invoked oom-killer: gfp_mask=0x140dca, order=0, oom_score_adj=1000",
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=stress,pid=77,uid=0",
            "Out of memory: Killed process 77 (stress) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:1000",
        ]);
        assert_eq!(got.len(), 1);
        assert!(got[0].is_system_oom());
        assert_eq!(
            got[0].event_message(),
            "System OOM encountered, victim process: stress, pid: 77"
        );
    }

    #[test]
    fn legacy_kernel_lines() {
        let got = run(&[
            "ruby invoked oom-killer: gfp_mask=0x201da, order=0, oom_score_adj=0",
            "Task in /mem2 killed as a result of limit of /mem3",
            "Killed process 19667 (evil-program2) total-vm:1460016kB, anon-rss:1414008kB",
        ]);
        assert_eq!(got[0].container_name, "/mem2");
        assert_eq!(got[0].victim_container_name, "/mem3");
        assert_eq!(got[0].pid, 19667);
        assert_eq!(got[0].process_name, "evil-program2");
        let sys = run(&[
            "x invoked oom-killer: gfp_mask=0x201da",
            "Out of memory: Kill process 1 (init) score 1 or sacrifice child",
            "Killed process 5 (a (b)) total-vm:1kB",
        ]);
        assert_eq!(sys[0].process_name, "a (b)");
        assert!(sys[0].is_system_oom());
    }

    #[test]
    fn line_table() {
        // (line, finishes an instance, pid, name, victim)
        let cases = [
            ("unrelated line", false, 0, "", "/"),
            ("Killed process abc (x)", false, 0, "", "/"),
            ("Killed process 12 (sh)", true, 12, "sh", "/"),
            (
                "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=a,b,mems_allowed=0,oom_memcg=/k/p,task_memcg=/k/p/c,task=x,y,pid=9,uid=0",
                true,
                9,
                "x,y",
                "/k/p",
            ),
            (
                "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=x,pid=notanumber,uid=0",
                false,
                0,
                "",
                "/",
            ),
        ];
        for (line, finishes, pid, name, victim) in cases {
            let mut p = OomParser::default();
            assert!(p.feed("a invoked oom-killer: x").is_none());
            match p.feed(line) {
                Some(o) => {
                    assert!(finishes, "{line}");
                    assert_eq!((o.pid, o.process_name.as_str()), (pid, name), "{line}");
                    assert_eq!(o.victim_container_name, victim, "{line}");
                }
                None => assert!(!finishes, "{line}"),
            }
        }
        // Outside an OOM nothing is reported, not even a complete summary line.
        let mut p = OomParser::default();
        assert!(p.feed("Killed process 12 (sh)").is_none());
        assert_eq!(OomInstance::new().event_message(), "System OOM encountered");
    }

    #[test]
    fn kmsg_records() {
        assert_eq!(
            kmsg_message("6,1234,5678901,-;Out of memory: Killed process 1 (x)\n SUBSYSTEM=mem\n"),
            Some("Out of memory: Killed process 1 (x)")
        );
        assert_eq!(kmsg_message("4,1,2,c,more;msg"), Some("msg"));
        assert_eq!(kmsg_message("garbage"), None);
    }
}
