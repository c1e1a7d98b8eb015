//! Certificates inside the cluster on the real node (issue 30): Blockwork installed with export
//! and a private CA enabled; a Cert's certificate, issued by the CA, exported into a Secret that
//! a pod mounts and serves TLS with, verified by a client against `ca.crt`; an ACM renewal
//! (simulated by the fault proxy in front of moto, on the host's bridge address) reaches the
//! pod's mounted files; the key rotator turns the exported Secret into a rotating key set.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use blockwork_e2e::eventually;
use blockwork_testenv::fault_proxy::FaultProxy;

use super::{CLIENT_IMAGE, POD_TIMEOUT, RESTRICTED_CONTAINER, RESTRICTED_POD, ROTATOR_PREFIX, Suite, text};

const ZONE: &str = "inside.e2e.example.com";

/// `openssl x509 -serial` as ACM shows serials: lowercase hex bytes separated by colons.
fn acm_serial(openssl: &str) -> String {
    let hex = openssl.trim().trim_start_matches("serial=").to_ascii_lowercase();
    let hex = if hex.len() % 2 == 1 { format!("0{hex}") } else { hex };
    hex.as_bytes().chunks(2).map(|c| String::from_utf8_lossy(c).into_owned()).collect::<Vec<_>>().join(":")
}

pub fn exported_certificates_serve_tls_follow_renewals_and_rotate(suite: &Suite) -> Result<()> {
    let node = &suite.node;
    // The proxy's tasks run on this runtime, as long as the scenario.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let proxy = runtime.block_on(FaultProxy::start_on(node.ip(), &suite.moto.endpoint()))?;
    let (zone, authority) = runtime.block_on(async {
        let zone = blockwork_testenv::aws::hosted_zone_at(&suite.moto.endpoint(), ZONE).await;
        let authority = blockwork_testenv::aws::private_ca_at(&suite.moto.endpoint(), "Blockwork e2e CA").await;
        (zone, authority)
    });
    let endpoint = format!("aws.endpointUrl={}", proxy.endpoint());
    let zones = format!("controllers.cert.dnsZones[0].name={ZONE},controllers.cert.dnsZones[0].id={zone}");
    let authorities = format!("controllers.cert.certificateAuthorities={{{authority}}}");
    suite.helm_install(&[
        "controllers.cert.enabled=true",
        &zones,
        "controllers.cert.exportSecrets=true",
        &authorities,
        // A renewal is seen at the listing's next sweep: sooner than the default 5 minutes here.
        "controllers.cert.listingInterval=15s",
        &endpoint,
        "aws.region=us-east-1",
        "extraEnv[0].name=AWS_ACCESS_KEY_ID,extraEnv[0].value=test,extraEnv[1].name=AWS_SECRET_ACCESS_KEY,extraEnv[1].value=test",
    ])?;

    let namespace = suite.new_namespace("inside")?;
    let host = format!("api-prod.{ZONE}");
    let prefix = ROTATOR_PREFIX;
    let cert = format!(
        "apiVersion: acm.blockwork.dev/v1\nkind: Cert\nmetadata: {{name: api, namespace: {namespace}}}\nspec:\n  serviceName: api\n  environment: prod\n  certificateAuthorityArn: {authority}\n  export:\n    secretName: api-tls\n    secretTemplate:\n      annotations: {{{prefix}/source-secret: 'true', {prefix}/destination-secret-name: api-keys, {prefix}/jwks: 'true'}}\n"
    );
    eventually("kubectl apply the Cert", Duration::from_secs(60), || match node.kubectl_with_input(&["apply", "-f", "-"], &cert) {
        Ok(_) => Ok(Some(())),
        Err(error) => {
            println!("e2e: applying the Cert failed, retrying: {error:#}");
            Err(error)
        }
    })?;
    node.kubectl(&["-n", &namespace, "wait", "--for=condition=Exported", "cert/api", "--timeout=180s"])?;
    let arn = text(&node.get_json(&["cert", "-n", &namespace, "api"])?["status"]["certificateArn"]);

    // A pod serves TLS with the Secret; another verifies it against ca.crt.
    let pod = |name: &str, command: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, labels: {{app: {name}}}}}\nspec:\n{RESTRICTED_POD}  terminationGracePeriodSeconds: 0\n  containers:\n  - name: {name}\n    image: {CLIENT_IMAGE}\n{RESTRICTED_CONTAINER}    command: [sh, -c, '{command}']\n    volumeMounts: [{{name: tls, mountPath: /tls}}]\n  volumes: [{{name: tls, secret: {{secretName: api-tls}}}}]\n"
        )
    };
    let server = pod("tls-server", "exec openssl s_server -accept 8443 -cert /tls/tls.crt -key /tls/tls.key -www -quiet");
    let service = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: tls-server, namespace: {namespace}}}\nspec: {{selector: {{app: tls-server}}, ports: [{{port: 8443}}]}}\n"
    );
    node.kubectl_with_input(&["apply", "-f", "-"], &format!("{server}---\n{service}---\n{}", pod("tls-client", "exec sleep 86400")))?;
    let timeout = format!("--timeout={}s", POD_TIMEOUT.as_secs());
    node.kubectl(&["-n", &namespace, "wait", "--for=condition=Ready", "pod/tls-server", "pod/tls-client", &timeout])?;
    let handshake = format!(
        "openssl s_client -connect tls-server.{namespace}.svc.cluster.local:8443 -servername {host} -verify_hostname {host} -CAfile /tls/ca.crt -verify_return_error </dev/null 2>&1"
    );
    let verified = eventually("a verified TLS handshake with the exported certificate", Duration::from_secs(60), || {
        let out = node.kubectl(&["-n", &namespace, "exec", "tls-client", "--", "sh", "-c", &handshake])?;
        Ok(out.contains("Verify return code: 0 (ok)").then_some(out))
    })?;
    ensure!(verified.contains(&format!("CN={host}")) || verified.contains(&format!("CN = {host}")), "{verified}");

    // ACM renews; the Secret follows within a sweep and the kubelet brings it into the pod.
    let renewed = runtime.block_on(proxy.renew_certificate(&arn)).context("renewing the certificate")?;
    eventually("the renewed certificate in the Secret", Duration::from_secs(120), || {
        let secret = node.get_json(&["secret", "-n", &namespace, "api-tls"])?;
        Ok((text(&secret["metadata"]["annotations"]["acm.blockwork.dev/serial"]) == renewed.serial).then_some(()))
    })?;
    eventually("the renewed certificate in the pod's mounted files", Duration::from_secs(240), || {
        let serial =
            node.kubectl(&["-n", &namespace, "exec", "tls-server", "--", "openssl", "x509", "-in", "/tls/tls.crt", "-noout", "-serial"])?;
        Ok((acm_serial(&serial) == renewed.serial).then_some(()))
    })?;
    let verify = format!("openssl verify -CAfile /tls/ca.crt -verify_hostname {host} /tls/tls.crt");
    let out = node.kubectl(&["-n", &namespace, "exec", "tls-client", "--", "sh", "-c", &verify])?;
    ensure!(out.contains("OK"), "the renewed certificate verifies against ca.crt: {out}");

    // The rotator rotated: the first certificate is current, the renewed one next, both in the JWK set.
    let keys = eventually("the key set rotated", Duration::from_secs(120), || {
        let target = node.get_json(&["secret", "-n", &namespace, "api-keys"])?;
        let rotated = !text(&target["data"]["tls.crt"]).is_empty();
        Ok(rotated.then_some(target))
    })?;
    let jwks = {
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD.decode(text(&keys["data"]["jwks.json"]))?;
        serde_json::from_slice::<serde_json::Value>(&raw)?
    };
    ensure!(jwks["keys"].as_array().map(Vec::len) == Some(2), "two keys after one renewal: {jwks}");

    node.kubectl(&["delete", "namespace", &namespace, "--wait=false"])?;
    drop(proxy);
    Ok(())
}
