module github.com/okd-project/scos-builder

go 1.26

require (
	github.com/coreos/ignition/v2 v2.24.0
	github.com/coreos/vcontext v0.0.0-20230201181013-d72178a18687
	github.com/klauspost/compress v1.20.4
	github.com/ulikunitz/xz v0.5.17
	github.com/urfave/cli/v3 v3.14.0
)

require (
	github.com/aws/aws-sdk-go-v2 v1.39.2 // indirect
	github.com/coreos/go-json v0.0.0-20230131223807-18775e0fb4fb // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.6.0 // indirect
	github.com/vincent-petithory/dataurl v1.0.0 // indirect
)
