module github.com/okd-project/scos-builder

go 1.26
