//! What a run found: rows of medians, targets as ratios, notes; printed as a
//! table or as JSON.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::stats::median;

/// One measured figure: the median over rounds of one subject in one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// `append`, `work cycle`, `live latency`, `fan-out`, `commands`.
    pub scenario: String,
    /// The case within the scenario, e.g. `batch 1, 32 tasks`.
    pub case: String,
    /// What was measured: an a2 store or a baseline.
    pub subject: String,
    /// The unit, e.g. `events/s`, `p99 ms`.
    pub metric: String,
    /// The median of `rounds`; `None` when not measured (see `note`).
    pub value: Option<f64>,
    /// Each round's figure, in run order.
    pub rounds: Vec<f64>,
    /// Why there is no value, or what to know about it.
    pub note: Option<String>,
}

/// A target of issue 5, evaluated on figures of the same run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    /// What is compared.
    pub name: String,
    /// The a2 figure.
    pub value: Option<f64>,
    /// The figure it is compared with (a baseline, or the absolute bar).
    pub baseline: Option<f64>,
    /// `value / baseline`.
    pub ratio: Option<f64>,
    /// The rule, e.g. `ratio >= 3`.
    pub required: String,
    /// Whether the rule holds; `None` when a figure is missing.
    pub met: Option<bool>,
}

/// Which way a target's ratio must go.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    /// `value / baseline >= x`.
    AtLeast(f64),
    /// `value / baseline <= x`.
    AtMost(f64),
}

/// Everything a run prints.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// Versions, sizes, mode.
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// Figures, in the order measured.
    pub rows: Vec<Row>,
    /// Targets (empty in quick mode).
    pub targets: Vec<Target>,
    /// Skipped parts, failures of optional baselines, profile findings.
    pub notes: Vec<String>,
}

impl Report {
    /// Adds one round's figure to its row (made on first use); the row's
    /// value is the median of its rounds so far.
    pub fn round(&mut self, scenario: &str, case: &str, subject: &str, metric: &str, value: f64) {
        if let Some(row) = self.find_mut(scenario, case, subject, metric) {
            row.rounds.push(value);
            row.value = median(&row.rounds);
        } else {
            self.add(scenario, case, subject, metric, vec![value]);
        }
    }

    fn find_mut(
        &mut self,
        scenario: &str,
        case: &str,
        subject: &str,
        metric: &str,
    ) -> Option<&mut Row> {
        self.rows.iter_mut().find(|r| {
            r.scenario == scenario && r.case == case && r.subject == subject && r.metric == metric
        })
    }

    /// Adds a row with the median of `rounds`.
    pub fn add(
        &mut self,
        scenario: &str,
        case: &str,
        subject: &str,
        metric: &str,
        rounds: Vec<f64>,
    ) {
        self.rows.push(Row {
            scenario: scenario.into(),
            case: case.into(),
            subject: subject.into(),
            metric: metric.into(),
            value: median(&rounds),
            rounds,
            note: None,
        });
    }

    /// Marks a row as not measured, saying why (once; a row measured in
    /// other rounds keeps its figures and gets the note).
    pub fn missing(&mut self, scenario: &str, case: &str, subject: &str, metric: &str, why: &str) {
        if let Some(row) = self.find_mut(scenario, case, subject, metric) {
            if row.note.is_none() {
                row.note = Some(why.into());
            }
            return;
        }
        self.rows.push(Row {
            scenario: scenario.into(),
            case: case.into(),
            subject: subject.into(),
            metric: metric.into(),
            value: None,
            rounds: Vec::new(),
            note: Some(why.into()),
        });
    }

    /// Sets the note of the row added last.
    pub fn note_last(&mut self, note: String) {
        if let Some(row) = self.rows.last_mut() {
            row.note = Some(note);
        }
    }

    /// Adds a note.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// The median of the row with these names, if measured.
    pub fn value(&self, scenario: &str, case: &str, subject: &str, metric: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.scenario == scenario
                    && r.case == case
                    && r.subject == subject
                    && r.metric == metric
            })
            .and_then(|r| r.value)
    }

    /// The median of the row of `scenario` whose case holds `case_part`,
    /// of `subject` and `metric` (the first such row): for scenarios whose
    /// case names carry their sizes.
    pub fn find(
        &self,
        scenario: &str,
        case_part: &str,
        subject: &str,
        metric: &str,
    ) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.scenario == scenario
                    && r.case.contains(case_part)
                    && r.subject == subject
                    && r.metric == metric
            })
            .and_then(|r| r.value)
    }

    /// Adds a target comparing `value` with `baseline`.
    pub fn target(&mut self, name: &str, value: Option<f64>, baseline: Option<f64>, bound: Bound) {
        let ratio = match (value, baseline) {
            (Some(v), Some(b)) if b > 0.0 => Some(v / b),
            _ => None,
        };
        let (required, met) = match bound {
            Bound::AtLeast(x) => (format!("ratio >= {x}"), ratio.map(|r| r >= x)),
            Bound::AtMost(x) => (format!("ratio <= {x}"), ratio.map(|r| r <= x)),
        };
        self.targets.push(Target {
            name: name.into(),
            value,
            baseline,
            ratio,
            required,
            met,
        });
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as plain-text tables (also valid Markdown).
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        for (key, value) in &self.meta {
            let v = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = writeln!(out, "{key}: {v}");
        }
        let mut scenarios: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !scenarios.contains(&r.scenario.as_str()) {
                scenarios.push(&r.scenario);
            }
        }
        for scenario in scenarios {
            let _ = writeln!(out, "\n### {scenario}\n");
            let rows: Vec<Vec<String>> = self
                .rows
                .iter()
                .filter(|r| r.scenario == scenario)
                .map(|r| {
                    vec![
                        r.case.clone(),
                        r.subject.clone(),
                        r.metric.clone(),
                        match r.value {
                            Some(v) => format_value(&r.metric, v),
                            None => "not available".into(),
                        },
                        {
                            let rounds = r
                                .rounds
                                .iter()
                                .map(|v| format_value(&r.metric, *v))
                                .collect::<Vec<_>>()
                                .join(" / ");
                            match (&r.note, rounds.is_empty()) {
                                (Some(n), true) => n.clone(),
                                (Some(n), false) => format!("{rounds} ({n})"),
                                (None, _) => rounds,
                            }
                        },
                    ]
                })
                .collect();
            render(
                &mut out,
                &["case", "subject", "metric", "median", "rounds (or note)"],
                &rows,
            );
        }
        if !self.targets.is_empty() {
            let _ = writeln!(out, "\n### targets\n");
            let rows: Vec<Vec<String>> = self
                .targets
                .iter()
                .map(|t| {
                    vec![
                        t.name.clone(),
                        t.value.map_or("n/a".into(), format_number),
                        t.baseline.map_or("n/a".into(), format_number),
                        t.ratio.map_or("n/a".into(), |v| format!("{v:.2}")),
                        t.required.clone(),
                        match t.met {
                            Some(true) => "met".into(),
                            Some(false) => "MISSED".into(),
                            None => "not available".into(),
                        },
                    ]
                })
                .collect();
            render(
                &mut out,
                &[
                    "target",
                    "a2",
                    "compared with",
                    "ratio",
                    "required",
                    "result",
                ],
                &rows,
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\n### notes\n");
            for n in &self.notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        out
    }
}

fn render(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    out.push_str(&line(header.iter().map(|h| h.to_string()).collect()));
    out.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect()));
    for row in rows {
        out.push_str(&line(row.clone()));
    }
}

/// Rates as whole numbers with thousands separators (under 100, with two
/// decimals), milliseconds with three decimals, everything else with two.
fn format_value(metric: &str, v: f64) -> String {
    if metric.ends_with("/s") && v.abs() < 100.0 {
        format!("{v:.2}")
    } else if metric.ends_with("/s") {
        group_thousands(v.round() as i64)
    } else if metric.contains("ms") {
        format!("{v:.3}")
    } else {
        format!("{v:.2}")
    }
}

fn format_number(v: f64) -> String {
    if v.abs() >= 1000.0 {
        group_thousands(v.round() as i64)
    } else {
        format!("{v:.3}")
    }
}

fn group_thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(1234567), "1 234 567");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(-1000), "-1 000");
    }

    #[test]
    fn targets_compare_ratios() {
        let mut r = Report::default();
        r.target("faster", Some(30.0), Some(10.0), Bound::AtLeast(3.0));
        r.target("latency", Some(5.0), Some(2.0), Bound::AtMost(2.0));
        r.target("missing", None, Some(2.0), Bound::AtMost(2.0));
        let met: Vec<Option<bool>> = r.targets.iter().map(|t| t.met).collect();
        assert_eq!(met, vec![Some(true), Some(false), None]);
        assert!(r.to_table().contains("MISSED"));
    }
}
