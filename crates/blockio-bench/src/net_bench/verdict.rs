//! The targets `net-bench` was built to check, each stated with the
//! figures of every blockio variant from this run: met where at least one
//! variant meets it (the figure names which), missed otherwise. A rate
//! target also states how busy the server's and the client's CPUs were:
//! where both are near full, the machine, not the server, bounds the
//! rate. With one server thread the client has one CPU of its own, so
//! its rate over its CPUs busy is the most it could drive against that
//! server at a full CPU: stated as a ratio to tokio's rate, it is the
//! ceiling this machine puts on the rate target.

use std::fmt::Write as _;

use super::servers::Runtime;
use super::workload::Workload;
use super::Row;

/// One target and what the run measured for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    /// The target, in words.
    pub target: String,
    /// Each blockio variant's figure.
    pub figures: String,
    /// Whether some variant met it.
    pub met: bool,
    /// For a rate target: the CPUs the server and the client kept busy,
    /// per runtime.
    pub busy: Option<String>,
}

const VARIANTS: [Runtime; 5] = [
    Runtime::Blockio,
    Runtime::BlockioThread,
    Runtime::BlockioCaller,
    Runtime::BlockioRound,
    Runtime::BlockioRoundStream,
];

/// The rows of one workload, by runtime.
struct Group<'a> {
    rows: Vec<&'a Row>,
}

impl<'a> Group<'a> {
    fn of(&self, rt: Runtime) -> Option<&'a Row> {
        self.rows.iter().copied().find(|r| r.runtime == rt)
    }

    /// A check over the variants: `figure` gives each one's text and
    /// whether it meets the target.
    fn check(&self, target: String, figure: impl Fn(&Row) -> Option<(String, bool)>) -> Check {
        let mut met = false;
        let figures: Vec<String> = VARIANTS
            .iter()
            .filter_map(|&v| {
                let (text, ok) = figure(self.of(v)?)?;
                met |= ok;
                Some(format!("{} {text}", v.name()))
            })
            .collect();
        Check {
            target,
            figures: figures.join("; "),
            met,
            busy: None,
        }
    }

    /// `check`, for a rate target: with the CPUs each runtime kept busy.
    fn rate_check(&self, target: String, figure: impl Fn(&Row) -> Option<(String, bool)>) -> Check {
        let tokio_rate = self.of(Runtime::Tokio).map(|t| t.rate);
        let busy: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let ceiling = match tokio_rate {
                    Some(t) if r.workload.one_server_thread() && r.client_cpus > 0.0 => {
                        format!(" (client-bound at {:.2}x)", r.rate / r.client_cpus / t)
                    }
                    _ => String::new(),
                };
                format!(
                    "{} {:.2}+{:.2}{ceiling}",
                    r.runtime.name(),
                    r.server_cpus,
                    r.client_cpus
                )
            })
            .collect();
        Check {
            busy: Some(busy.join(", ")),
            ..self.check(target, figure)
        }
    }
}

/// The targets that apply to the workloads in `rows`.
pub fn check(rows: &[Row]) -> Vec<Check> {
    let mut labels: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    labels.dedup();
    let mut out = Vec::new();
    for label in labels {
        let g = Group {
            rows: rows.iter().filter(|r| r.label == label).collect(),
        };
        let Some(tokio) = g.of(Runtime::Tokio) else {
            continue;
        };
        match tokio.workload {
            Workload::Http { .. } => http_checks(&g, tokio, label, &mut out),
            _ => other_checks(&g, tokio, label, &mut out),
        }
        let unit = tokio.unit;
        out.push(g.check(format!("{label}: CPU per {unit} <= tokio's"), |r| {
            let (c, t) = (r.cpu_us_per_unit, tokio.cpu_us_per_unit);
            Some((format!("{c:.2} vs {t:.2} us"), c <= t))
        }));
    }
    out
}

/// A row's rate over tokio's, median of the rounds.
fn vs(r: &Row) -> Option<f64> {
    r.rate_vs_tokio.map(|x| x[0])
}

/// The targets of an HTTP workload (`tokio` is its tokio row), pushed on
/// `out`.
fn http_checks(g: &Group<'_>, tokio: &Row, label: &str, out: &mut Vec<Check>) {
    match tokio.workload {
        Workload::Http {
            connections: 50,
            threads: 1,
            idle: 0,
        } => out.push(
            g.rate_check(format!("{label}: req/s >= 1.0x tokio, p99 <= 1.1x"), |r| {
                let (a, b) = (vs(r)?, r.p99_vs_tokio?[0]);
                Some((format!("{a:.3}x, p99 {b:.3}x"), a >= 1.0 && b <= 1.1))
            }),
        ),
        Workload::Http {
            connections: 1000,
            threads: 1,
            idle: 0,
        } => {
            out.push(g.rate_check(
                format!("{label}: req/s >= 1.15x tokio, >= 1.0x monoio"),
                |r| {
                    let a = vs(r)?;
                    Some(match r.rate_vs_monoio {
                        Some([b, ..]) => (
                            format!("{a:.3}x tokio, {b:.3}x monoio"),
                            a >= 1.15 && b >= 1.0,
                        ),
                        None => (format!("{a:.3}x tokio, monoio not run"), false),
                    })
                },
            ));
            out.push(
                g.check(format!("{label}: < 1 system call per request"), |r| {
                    let c = r.syscalls_per_unit?;
                    Some((format!("{c:.3}"), c < 1.0))
                }),
            );
        }
        Workload::Http {
            threads: 1,
            idle: 1..,
            ..
        } => out.push(g.rate_check(
            format!(
                "{label}: idle peers delay no one: req/s >= 1.0x tokio, p99 <= 1.2x, \
                 with default settings (blockio)"
            ),
            |r| {
                let (a, b) = (vs(r)?, r.p99_vs_tokio?[0]);
                let default = r.runtime == Runtime::Blockio;
                Some((
                    format!("{a:.3}x, p99 {b:.3}x"),
                    default && a >= 1.0 && b <= 1.2,
                ))
            },
        )),
        Workload::Http { threads: 2.., .. } => out.push(g.rate_check(
            format!("{label}: req/s >= tokio with 2 workers"),
            |r| {
                let a = vs(r)?;
                Some((format!("{a:.3}x"), a >= 1.0))
            },
        )),
        _ => {}
    }
}

/// The targets of an echo or stream workload (`tokio` is its tokio row),
/// pushed on `out`.
fn other_checks(g: &Group<'_>, tokio: &Row, label: &str, out: &mut Vec<Check>) {
    match tokio.workload {
        Workload::Echo {
            connections: 500, ..
        } => out.push(g.rate_check(format!("{label}: msg/s >= 1.2x tokio"), |r| {
            let a = vs(r)?;
            Some((format!("{a:.3}x"), a >= 1.2))
        })),
        Workload::Stream { .. } => out.push(g.rate_check(
            format!("{label}: MB/s >= 1.0x tokio, fewer context switches"),
            |r| {
                let a = vs(r)?;
                let (cs, t) = (r.switches_per_unit, tokio.switches_per_unit);
                Some((
                    format!("{a:.3}x, {cs:.2} vs {t:.2} switches/MB"),
                    a >= 1.0 && cs < t,
                ))
            },
        )),
        _ => {}
    }
}

/// The checks as text.
pub fn report(checks: &[Check]) -> String {
    let mut s = String::from(
        "\nTargets (met where some blockio variant meets it; CPUs busy as server+client, and\n\
         client-bound at Nx: the client's rate at a full CPU over tokio's rate, the most\n\
         it could drive that server at the client's cost per unit in that run):\n",
    );
    for c in checks {
        let _ = writeln!(
            s,
            "  [{}] {}: {}",
            if c.met { "met" } else { "MISSED" },
            c.target,
            c.figures
        );
        if let Some(busy) = &c.busy {
            let _ = writeln!(s, "      CPUs busy, server+client: {busy}");
        }
    }
    s
}
