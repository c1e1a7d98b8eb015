#!/usr/bin/env python3
"""Writes the seed corpora of the cargo-fuzz targets from the hostile-input corpus
(crates/blockwork/tests/hostile/*.yaml) and the examples (examples/*.yaml): each manifest as JSON
for the webhook and diff targets, each DNS name it holds for dns_name. Run from anywhere after a
case is added there; the seeds are committed (small), what the fuzzer finds is not (fuzz/corpus).
Cases that `grow` to a huge object are taken without the growth: libFuzzer's input length stays
small, and the fuzzer makes long inputs itself."""
import hashlib
import json
import pathlib

import yaml

fuzz = pathlib.Path(__file__).resolve().parent.parent
repo = fuzz.parent
seeds = fuzz / "seeds"


def write(target, content):
    data = content.encode() if isinstance(content, str) else content
    directory = seeds / target
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def names(value):
    """Every string under a key that holds DNS names."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("domain", "domainName", "primaryDomainName", "name") and isinstance(item, str):
                yield item
            elif key == "subjectAlternativeNames" and isinstance(item, list):
                yield from (i for i in item if isinstance(i, str))
            else:
                yield from names(item)
    elif isinstance(value, list):
        for item in value:
            yield from names(item)


manifests = [yaml.safe_load(p.read_text())["object"] for p in sorted((repo / "crates/blockwork/tests/hostile").glob("*.yaml"))]
manifests += [m for p in sorted((repo / "examples").glob("*.yaml")) for m in yaml.safe_load_all(p.read_text()) if m]
for manifest in manifests:
    kind = manifest.get("kind")
    body = json.dumps(manifest, ensure_ascii=False, sort_keys=True)
    if kind == "DistributionTenant":
        write("admission_webhook", body)
        write("tenant_diff", json.dumps(manifest.get("spec", {}), ensure_ascii=False, sort_keys=True))
    elif kind == "Cache":
        write("conversion_webhook", body)
    elif kind == "Cert":
        write("admission_webhook", body)
    for name in names(manifest):
        write("dns_name", name)
