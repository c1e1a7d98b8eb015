.PHONY: dev test e2e crds install-test-tools

# Local control plane + AWS emulators + `blockwork run` + examples, until Ctrl-C.
dev:
	scripts/dev

# Every test (installs the pinned test tools first).
test:
	scripts/test

# The end-to-end suite on a real node (root): Blockwork's image, its chart, every scenario.
e2e:
	scripts/e2e

# Regenerate config/crd/ from the Rust types.
crds:
	cargo run -q -p blockwork -- crds --output-dir config/crd

install-test-tools:
	scripts/install-test-tools
