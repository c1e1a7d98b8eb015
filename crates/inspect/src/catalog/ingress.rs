//! The catalog's entries: the Ingress controller's events on Ingresses that name Certs (ADR 0022).

use super::Scope::Ingress;
use super::{Entry, NOTHING, fine, problem, waiting};

pub(super) const ENTRIES: &[Entry] = &[
    problem(
        "InvalidAnnotation",
        Ingress,
        "A blockwork.dev/ annotation of the Ingress has a value that is not documented, or is a key the Ingress controller does not read (a typo); the event names the accepted values or keys. Nothing is done for the Ingress until it is fixed: what Blockwork wrote stays as it is.",
        "Fix the annotation as the event says: blockwork.dev/certificates takes Cert names, comma-separated; blockwork.dev/certificate-from-hosts takes true or false.",
    ),
    waiting(
        "WaitingForCerts",
        Ingress,
        "A Cert the Ingress names is missing or not Ready (the event says which and why); alb.ingress.kubernetes.io/certificate-arn keeps what was written before (a Cert replacing its certificate keeps serving the old one meanwhile).",
        "Nothing to do unless it lasts; then `blockwork explain cert/NAME` for the Cert named. The Ingress is woken when it changes.",
    ),
    fine(
        "CertificatesWritten",
        Ingress,
        "alb.ingress.kubernetes.io/certificate-arn holds the ARNs of the Certs the Ingress names, in order (the first is the listener's default).",
        NOTHING,
    ),
    fine(
        "CertificatesRemoved",
        Ingress,
        "The Ingress names no Cert any more: the value Blockwork wrote in alb.ingress.kubernetes.io/certificate-arn is removed (a value someone else set is never touched).",
        NOTHING,
    ),
    problem(
        "AnnotationConflict",
        Ingress,
        "alb.ingress.kubernetes.io/certificate-arn is set by someone else (another field manager, named in the event): Blockwork does not overwrite it, so the Certs named are not on the load balancer.",
        "Remove the annotation from where it is set (your manifest, or `kubectl annotate ingress NAME alb.ingress.kubernetes.io/certificate-arn-`) to let Blockwork write it; or remove blockwork.dev/certificates.",
    ),
    fine(
        "CertificateMade",
        Ingress,
        "The Cert for the Ingress's TLS hosts (blockwork.dev/certificate-from-hosts) is made or brought up to date: named after the Ingress, owned by it.",
        NOTHING,
    ),
    problem(
        "CertificateNotMade",
        Ingress,
        "blockwork.dev/certificate-from-hosts asks for a Cert, and none is made: the namespace's AwsIdentity does not grant the hosts, the Ingress lists no TLS host, a Cert of that name is someone else's, or the Cert webhook refused it (the event says which). Nothing is requested from ACM.",
        "Fix what the event names: ask the platform team to grant the hosts' zone to the namespace (docs/multi-account.md), add spec.tls[].hosts, or rename the other Cert.",
    ),
    fine(
        "CertificateUnmade",
        Ingress,
        "blockwork.dev/certificate-from-hosts is no longer true: the Cert made from the hosts is deleted (its certificate goes once the load balancer no longer lists it).",
        NOTHING,
    ),
];
