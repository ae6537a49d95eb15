module github.com/okd-project/scos-builder

go 1.26

require (
	github.com/coreos/ignition/v2 v2.24.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/ulikunitz/xz v0.5.17 // indirect
	github.com/urfave/cli/v3 v3.14.0 // indirect
)
