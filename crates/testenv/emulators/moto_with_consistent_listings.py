"""moto_server whose ACM ListCertificates is consistent under concurrent requests.

moto's server is threaded, and ACM's ListCertificates iterates the backend's dict of
certificates while another request adds or deletes one: it answers 500 ("dictionary changed size
during iteration"), which AWS never does. Under cargo-nextest the test processes of a binary
share one moto (crates/testenv/src/shared.rs), so concurrent requests are the rule. Here the
listing runs moto's own code over a copy of the certificates taken at once (one C call under
Python's GIL); everything else is moto_server unchanged: `python3 THIS -H HOST -p PORT`.
"""

import sys

import moto.server
from moto.acm.models import AWSCertificateManagerBackend

moto_listing = AWSCertificateManagerBackend.list_certificates


class Snapshot:
    """What moto's listing reads of its backend, copied at once."""

    def __init__(self, backend):
        self._certificates = dict(backend._certificates)

    def get_certificate(self, arn):
        # As moto's get_certificate: check() moves a certificate on (PENDING_VALIDATION to ISSUED).
        certificate = self._certificates[arn]
        certificate.check()
        return certificate


def list_certificates(self, statuses, includes):
    return moto_listing(Snapshot(self), statuses, includes)


AWSCertificateManagerBackend.list_certificates = list_certificates

if __name__ == "__main__":
    moto.server.main(sys.argv[1:])
