module github.com/okd-project/scos-builder

go 1.26.0

require (
	github.com/urfave/cli/v3 v3.14.0 // indirect
	go.podman.io/image/v5 v5.42.1 // indirect
)
