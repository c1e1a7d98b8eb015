//! What the Ingress controller does to an Ingress, decided from what it read: the load balancer's
//! certificates once every Cert named is Ready, and the Cert made from the Ingress's TLS hosts.
//! Pure, so every rule has a unit test.

use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;

use crate::api::{Cert, CertSpec};

/// A Cert named by an Ingress, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    /// No Cert of that name in the namespace.
    Missing,
    /// Not usable yet (or no more): why, in the Cert's words.
    NotReady(String),
    /// Its certificate's ARN.
    Ready(String),
}

/// What a Cert offers an Ingress: Ready for its current generation, with an ARN, and not being
/// deleted (an Ingress that does not use it yet must not start to).
pub fn offer(cert: Option<&Cert>) -> Offer {
    let Some(cert) = cert else { return Offer::Missing };
    if cert.metadata.deletion_timestamp.is_some() {
        return Offer::NotReady("it is being deleted".to_owned());
    }
    let status = cert.status.as_ref();
    let ready = status.and_then(|s| s.condition(blockwork_runtime::status::READY));
    match ready {
        Some(ready) if ready.status == "True" => {}
        Some(ready) => return Offer::NotReady(format!("{}: {}", ready.reason, ready.message)),
        None => return Offer::NotReady("its controller has not looked at it yet".to_owned()),
    }
    if status.and_then(|s| s.observed_generation) < cert.metadata.generation {
        return Offer::NotReady("its controller has not applied its latest change yet".to_owned());
    }
    match status.and_then(|s| s.observation.certificate_arn.clone()) {
        Some(arn) => Offer::Ready(arn),
        None => Offer::NotReady("it has no certificate ARN yet".to_owned()),
    }
}

/// What becomes of the load balancer's certificate annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Annotation {
    /// Write this value: the named Certs' ARNs, in order.
    Write(String),
    /// Leave what is written (make before break: a Cert replacing its certificate keeps serving
    /// the old one until the new one is issued): these Certs are not Ready, each with why.
    Wait(Vec<String>),
    /// Remove the value Blockwork wrote: no Cert is named any more.
    Remove,
    /// As it should be.
    Keep,
}

/// The annotation for `named` (the Certs the Ingress names, in order, as read), given the value
/// Blockwork wrote before (`written`, `None` when it owns none).
pub fn annotation(named: &[(String, Offer)], written: Option<&str>) -> Annotation {
    if named.is_empty() {
        return if written.is_some() { Annotation::Remove } else { Annotation::Keep };
    }
    let mut arns = Vec::new();
    let mut waiting = Vec::new();
    for (name, offer) in named {
        match offer {
            Offer::Ready(arn) => arns.push(arn.as_str()),
            Offer::Missing => waiting.push(format!("Cert {name} does not exist")),
            Offer::NotReady(why) => waiting.push(format!("Cert {name} is not Ready ({why})")),
        }
    }
    if !waiting.is_empty() {
        return Annotation::Wait(waiting);
    }
    let value = arns.join(",");
    if written == Some(value.as_str()) { Annotation::Keep } else { Annotation::Write(value) }
}

/// The Cert made from an Ingress's TLS hosts: named after the Ingress, for its hosts (the first
/// the primary domain, in order, each once), deleted with its certificate when the Ingress goes
/// (it is the Ingress's alone). `Err`: why none can be made.
pub fn from_hosts(ingress: &Ingress) -> Result<CertSpec, String> {
    let mut hosts: Vec<String> = Vec::new();
    for host in ingress.spec.iter().flat_map(|s| s.tls.iter().flatten()).flat_map(|tls| tls.hosts.iter().flatten()) {
        let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
        if !host.is_empty() && !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    let Some((primary, alternative)) = hosts.split_first() else {
        return Err("the Ingress lists no host under spec.tls[].hosts to make a Cert for".to_owned());
    };
    if alternative.len() > crate::api::MAX_SANS {
        return Err(format!("the Ingress lists {} TLS hosts; an ACM certificate takes at most {}", hosts.len(), crate::api::MAX_SANS + 1));
    }
    Ok(CertSpec {
        service_name: label(&ingress.name_any()),
        environment: "ingress".to_owned(),
        domain_name: Some(primary.clone()),
        subject_alternative_names: alternative.to_vec(),
        delete_on_removal: true,
        ..CertSpec::default()
    })
}

/// An RFC 1123 label from an object name (a DNS subdomain): the Cert's `serviceName`, which a
/// Cert with a `domainName` does not use for its names.
fn label(name: &str) -> String {
    let label: String = name.chars().map(|c| if c == '.' { '-' } else { c }).take(63).collect();
    let label = label.trim_matches('-');
    if label.is_empty() { "ingress".to_owned() } else { label.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CertStatus;
    use k8s_openapi::api::networking::v1::{IngressSpec, IngressTLS};

    const A: &str = "arn:aws:acm:us-east-1:123456789012:certificate/a";
    const B: &str = "arn:aws:acm:us-east-1:123456789012:certificate/b";

    fn ready(name: &str, arn: &str) -> (String, Offer) {
        (name.to_owned(), Offer::Ready(arn.to_owned()))
    }

    #[test]
    fn the_load_balancer_gets_every_named_cert_s_arn_in_order_once_all_are_ready() {
        assert_eq!(annotation(&[ready("b", B), ready("a", A)], None), Annotation::Write(format!("{B},{A}")));
        assert_eq!(annotation(&[ready("a", A)], Some(A)), Annotation::Keep);
        assert_eq!(annotation(&[ready("a", B)], Some(A)), Annotation::Write(B.to_owned()), "a replaced certificate is followed");
    }

    #[test]
    fn while_a_named_cert_is_not_ready_what_is_written_stays() {
        let named =
            [ready("a", A), ("b".to_owned(), Offer::NotReady("InProgress: waiting for ACM".into())), ("c".to_owned(), Offer::Missing)];
        assert_eq!(
            annotation(&named, Some(A)),
            Annotation::Wait(vec!["Cert b is not Ready (InProgress: waiting for ACM)".into(), "Cert c does not exist".into()])
        );
    }

    #[test]
    fn no_cert_named_removes_only_what_blockwork_wrote() {
        assert_eq!(annotation(&[], Some(A)), Annotation::Remove);
        assert_eq!(annotation(&[], None), Annotation::Keep, "a value someone else wrote is theirs");
    }

    fn cert(ready: bool, generation: i64, observed: i64) -> Cert {
        let mut cert = Cert::new("a", CertSpec::default());
        cert.metadata.generation = Some(generation);
        let mut status = CertStatus { observed_generation: Some(observed), ..CertStatus::default() };
        status.observation.certificate_arn = Some(A.to_owned());
        status.conditions = vec![blockwork_runtime::status::condition("Ready", ready, "Available", "ready", Some(generation))];
        cert.status = Some(status);
        cert
    }

    #[test]
    fn a_cert_offers_its_arn_when_ready_for_its_current_generation_and_not_being_deleted() {
        assert_eq!(offer(Some(&cert(true, 2, 2))), Offer::Ready(A.to_owned()));
        assert!(matches!(offer(Some(&cert(true, 3, 2))), Offer::NotReady(why) if why.contains("latest change")));
        assert!(matches!(offer(Some(&cert(false, 2, 2))), Offer::NotReady(why) if why.starts_with("Available")));
        let mut deleting = cert(true, 2, 2);
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        assert_eq!(offer(Some(&deleting)), Offer::NotReady("it is being deleted".to_owned()));
        assert_eq!(offer(None), Offer::Missing);
    }

    fn ingress(name: &str, hosts: &[&[&str]]) -> Ingress {
        let mut ingress = Ingress::default();
        ingress.metadata.name = Some(name.to_owned());
        let tls =
            hosts.iter().map(|h| IngressTLS { hosts: Some(h.iter().map(|s| (*s).to_owned()).collect()), secret_name: None }).collect();
        ingress.spec = Some(IngressSpec { tls: Some(tls), ..IngressSpec::default() });
        ingress
    }

    #[test]
    fn the_cert_from_hosts_is_for_every_tls_host_the_first_primary_each_once() {
        let spec = from_hosts(&ingress("web.shop", &[&["www.example.com", "api.example.com"], &["WWW.example.com.", "*.example.com"]]))
            .expect("a Cert");
        assert_eq!(spec.domain_name.as_deref(), Some("www.example.com"));
        assert_eq!(spec.subject_alternative_names, ["api.example.com", "*.example.com"]);
        assert_eq!((spec.service_name.as_str(), spec.environment.as_str()), ("web-shop", "ingress"));
        assert!(spec.delete_on_removal, "the Ingress's alone: it goes with it");
    }

    #[test]
    fn an_ingress_without_tls_hosts_gets_no_cert_and_is_told_why() {
        let refused = from_hosts(&ingress("web", &[])).expect_err("no hosts");
        assert!(refused.contains("spec.tls[].hosts"), "{refused}");
    }
}
