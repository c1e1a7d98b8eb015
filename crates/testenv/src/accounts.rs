//! Which AWS account a request is made in, as the fault proxy tells it (ADR 0014): AWS knows the
//! account of every access key, and an assumed role's temporary key is in the role's account.
//! The proxy learns the same from the AssumeRole answers that pass through it (moto derives the
//! account from the role ARN, as AWS does), into an [`AccountBook`] that proxies in front of
//! different emulators can share (STS and Route 53 on moto, CloudFront on MiniStack).
//!
//! With it the proxy can fault or throttle one account while another goes untouched, and key
//! its throttling buckets by account as AWS does. Two behaviours AWS has and the emulators lack
//! are added faithfully:
//!
//! - **A role's trust policy checks the ExternalId** ([`AccountBook::require_external_id`]):
//!   moto accepts any AssumeRole; AWS refuses one whose ExternalId the role's trust policy does
//!   not name, with `AccessDenied` ("… is not authorized to perform: sts:AssumeRole on resource:
//!   …").
//! - **MiniStack learns a session's account** ([`crate::fault_proxy::FaultProxy::present_accounts`]):
//!   MiniStack scopes its state by account only for a 12-digit access key or one of its own STS
//!   sessions; a key moto's STS issued would land in its default account. The proxy presents
//!   such a key to MiniStack as its account's id (MiniStack checks no signature).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// One AssumeRole as it was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssumeRole {
    pub role_arn: String,
    pub external_id: Option<String>,
    pub session_name: String,
}

#[derive(Debug, Default)]
struct Book {
    /// Access key id → account id.
    keys: HashMap<String, String>,
    /// Role ARN → the ExternalId its trust policy names.
    external_ids: HashMap<String, String>,
    asked: Vec<AssumeRole>,
}

/// What the proxies sharing it have learnt of accounts.
#[derive(Clone, Debug, Default)]
pub struct AccountBook(Arc<Mutex<Book>>);

impl AccountBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on AssumeRole of `role_arn` is refused unless it carries `external_id`.
    pub fn require_external_id(&self, role_arn: &str, external_id: &str) {
        self.lock().external_ids.insert(role_arn.to_owned(), external_id.to_owned());
    }

    /// Every AssumeRole asked so far, in order.
    pub fn assumed(&self) -> Vec<AssumeRole> {
        self.lock().asked.clone()
    }

    /// The account an access key is in, if an AssumeRole answer told it.
    pub fn account_of_key(&self, access_key: &str) -> Option<String> {
        self.lock().keys.get(access_key).cloned()
    }

    /// Records an AssumeRole request; `false` when the role's trust policy refuses it.
    pub(crate) fn asked(&self, request: AssumeRole) -> bool {
        let mut book = self.lock();
        let allowed = book.external_ids.get(&request.role_arn).is_none_or(|wanted| request.external_id.as_deref() == Some(wanted));
        book.asked.push(request);
        allowed
    }

    /// Learns the account of the key an AssumeRole of `role_arn` answered with.
    pub(crate) fn answered(&self, role_arn: &str, answer: &str) {
        let (Some(account), Some(key)) = (account_of_role(role_arn), element(answer, "AccessKeyId")) else { return };
        self.lock().keys.insert(key.to_owned(), account.to_owned());
    }
}

/// The AssumeRole of an STS request's form body (`Action=AssumeRole&RoleArn=…`).
pub(crate) fn assume_role_request(body: &[u8]) -> Option<AssumeRole> {
    let form: HashMap<String, String> = url_decoded(&String::from_utf8_lossy(body));
    (form.get("Action").map(String::as_str) == Some("AssumeRole")).then(|| AssumeRole {
        role_arn: form.get("RoleArn").cloned().unwrap_or_default(),
        external_id: form.get("ExternalId").cloned(),
        session_name: form.get("RoleSessionName").cloned().unwrap_or_default(),
    })
}

/// The access key id of a SigV4 `Authorization` header.
pub(crate) fn access_key(authorization: &str) -> Option<&str> {
    authorization.split("Credential=").nth(1)?.split('/').next()
}

/// `authorization` with its access key id replaced by `with`.
pub(crate) fn with_access_key(authorization: &str, with: &str) -> Option<String> {
    let key = access_key(authorization)?;
    Some(authorization.replacen(&format!("Credential={key}/"), &format!("Credential={with}/"), 1))
}

/// AWS's answer to an AssumeRole the role's trust policy refuses.
pub(crate) fn refusal_message(role_arn: &str) -> String {
    let account = account_of_role(role_arn).unwrap_or("000000000000");
    format!(
        "User: arn:aws:sts::{account}:assumed-role/operator/blockwork is not authorized to perform: sts:AssumeRole on resource: {role_arn}"
    )
}

fn account_of_role(role_arn: &str) -> Option<&str> {
    role_arn.split(':').nth(4).filter(|account| account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()))
}

fn element<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = xml[start..].find(&format!("</{tag}>"))?;
    Some(&xml[start..start + end])
}

fn url_decoded(form: &str) -> HashMap<String, String> {
    form.split('&').filter_map(|pair| pair.split_once('=')).map(|(key, value)| (percent_decoded(key), percent_decoded(value))).collect()
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assume_role_request_is_read_from_its_form() {
        let body = b"Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A111111111111%3Arole%2Fteam&RoleSessionName=blockwork.c.team-a&ExternalId=ext%2B1";
        let asked = assume_role_request(body).expect("an AssumeRole");
        assert_eq!(asked.role_arn, "arn:aws:iam::111111111111:role/team");
        assert_eq!(asked.session_name, "blockwork.c.team-a");
        assert_eq!(asked.external_id.as_deref(), Some("ext+1"));
        assert!(assume_role_request(b"Action=GetCallerIdentity").is_none());
    }

    #[test]
    fn a_role_requiring_an_external_id_refuses_any_other() {
        let book = AccountBook::default();
        book.require_external_id("arn:aws:iam::111111111111:role/team", "right");
        let ask = |external_id: Option<&str>| AssumeRole {
            role_arn: "arn:aws:iam::111111111111:role/team".into(),
            external_id: external_id.map(str::to_owned),
            session_name: "s".into(),
        };
        assert!(book.asked(ask(Some("right"))));
        assert!(!book.asked(ask(Some("wrong"))));
        assert!(!book.asked(ask(None)));
        assert_eq!(book.assumed().len(), 3);
    }

    #[test]
    fn an_answer_tells_the_account_of_its_key() {
        let book = AccountBook::default();
        let answer = "<AssumeRoleResponse><Credentials><AccessKeyId>ASIAEXAMPLE</AccessKeyId></Credentials></AssumeRoleResponse>";
        book.answered("arn:aws:iam::222222222222:role/dns", answer);
        assert_eq!(book.account_of_key("ASIAEXAMPLE").as_deref(), Some("222222222222"));
        let header = "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/20260101/us-east-1/cloudfront/aws4_request, SignedHeaders=host";
        assert_eq!(access_key(header), Some("ASIAEXAMPLE"));
        assert_eq!(
            with_access_key(header, "222222222222").as_deref(),
            Some("AWS4-HMAC-SHA256 Credential=222222222222/20260101/us-east-1/cloudfront/aws4_request, SignedHeaders=host")
        );
    }
}
