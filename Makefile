.PHONY: dev test e2e fuzz crds chart install install-test-tools

# Local control plane + AWS emulators + `blockwork run` + examples, until Ctrl-C.
dev:
	scripts/dev

# Every test, with cargo-nextest (the pinned test tools install beside the build: scripts/test).
test:
	scripts/test

# The end-to-end suite on a real node (root): Blockwork's image, its chart, every scenario.
e2e:
	scripts/e2e

# Coverage-guided fuzzing (cargo-fuzz, nightly), every target: `make fuzz FUZZ_SECONDS=300` for longer.
fuzz:
	scripts/fuzz $(or $(FUZZ_SECONDS),30)

# Regenerate config/crd/ from the Rust types.
crds:
	cargo run -q -p blockwork -- crds --output-dir config/crd

# The binary, also as the kubectl plugin `kubectl-blockwork` (kubectl finds it on the PATH).
install:
	cargo install --locked --path crates/blockwork
	ln -sf blockwork "$${CARGO_HOME:-$$HOME/.cargo}/bin/kubectl-blockwork"

install-test-tools:
	scripts/install-test-tools

# Regenerate what the Helm chart is generated from (charts/blockwork/files/).
chart:
	cargo run -q -p blockwork -- chart-files --output-dir charts/blockwork/files
	mkdir -p charts/blockwork/files/prometheus
	cp config/prometheus/*.yaml charts/blockwork/files/prometheus/
