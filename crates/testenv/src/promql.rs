//! What a process exports against what alerts and dashboards read: the series a Prometheus
//! registry exposes, and the selectors of a PromQL expression. The Cert alert tests and the
//! chart's dashboard and rule tests keep the two in step with these.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::registry::Registry;
use promql_parser::parser::{Expr, VectorSelector};
use promql_parser::util::{ExprVisitor, walk_expr};

/// Every series `registry` exposes, by sample name (`_total`, `_bucket`, `_count`, `_sum`
/// included), with the label names each carries. Only families with a series appear: touch
/// every metric once first.
pub fn exported(registry: &Registry) -> Result<BTreeMap<String, BTreeSet<String>>, std::fmt::Error> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let Some(end) = line.find(['{', ' ']) else { continue };
        let labels = series.entry(line[..end].to_owned()).or_default();
        if let Some((inner, _)) = line[end..].strip_prefix('{').and_then(|rest| rest.split_once('}')) {
            labels.extend(inner.split(',').filter_map(|pair| pair.split_once('=')).map(|(name, _)| name.to_owned()));
        }
    }
    Ok(series)
}

/// The vector selectors of `expr` (inside range selectors, functions, aggregations and binary
/// operations alike); an error when it is not PromQL.
pub fn selectors(expr: &str) -> Result<Vec<VectorSelector>, String> {
    let parsed = promql_parser::parser::parse(expr).map_err(|e| format!("{expr:?} is not valid PromQL: {e}"))?;
    let mut selectors = Selectors::default();
    walk_expr(&mut selectors, &parsed)?;
    Ok(selectors.0)
}

#[derive(Default)]
struct Selectors(Vec<VectorSelector>);

impl ExprVisitor for Selectors {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        match expr {
            Expr::VectorSelector(selector) => self.0.push(selector.clone()),
            Expr::MatrixSelector(matrix) => self.0.push(matrix.vs.clone()),
            _ => {}
        }
        Ok(true)
    }
}
