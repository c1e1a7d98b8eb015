//! The tenant diff: any DistributionTenant spec (JSON), cut to what the CRD admits, never differs
//! from itself reordered, and a changed domain or certificate is named without the account id.
#![no_main]

use blockwork_properties::tenant;
use blockwork_tenant::DistributionTenantSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let Ok(spec) = serde_json::from_slice::<DistributionTenantSpec>(body) else { return };
    let domains = spec.domains.iter().map(|d| d.domain.clone()).collect();
    let Some(spec) = tenant::as_the_crd_admits(spec, domains) else { return };
    if let Err(violation) = tenant::a_spec_never_differs_from_itself(&spec, body.len()) {
        panic!("{violation}");
    }
    if let Err(violation) = tenant::a_diff_names_every_changed_field_and_masks_account_ids(&spec, "123456789012", "added.example.org") {
        panic!("{violation}");
    }
});
