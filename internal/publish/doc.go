// Package publish turns live-build output directories into container-registry
// content and pushes it, in one of two forms:
//
// machine-os-images (FormatMachineOSImages): the layout of OpenShift's
// machine-os-images image, from which the agent-based installer extracts its
// base ISO (`oc image extract --path /coreos/coreos-<arch>.iso
// --filter-by-os=linux/<goarch>`). One image per architecture, each with one
// added gzip layer holding
//
//	/coreos/coreos-<arch>.iso          the live ISO
//	/coreos/coreos-<arch>.iso.sha256   its sha256, lowercase hex, no newline
//	/coreos/coreos-stream.json         the merged stream of all architectures
//
// (arch is the RPM name: x86_64, aarch64 …) and the label
// io.openshift.release.operator=true, optionally on top of the layers and
// config (labels, env, entrypoint) of a base image pulled for the same
// platform — use a base that carries machine-os-images' scripts when
// baremetal IPI must keep working. The images are joined in a Docker
// manifest list of schema 2 manifests (ManifestV2S2, the default: every oc
// version reads it) or an OCI image index (ManifestOCI), with platforms
// linux/<goarch>.
//
// oci-artifact (FormatOCIArtifact): an OCI image index holding, per
// architecture, an artifact manifest with artifactType
// application/vnd.diskimage.iso (the convention of coreos-assembler's import
// and Flight Control), platform {os: linux, architecture: <goarch>}, the
// empty config, and the ISO as its single layer (media type
// application/vnd.diskimage.iso, annotation org.opencontainers.image.title =
// the ISO file name); plus one manifest without platform whose artifactType
// and single layer are application/vnd.coreos.stream+json, holding the
// merged stream JSON. That stream media type is invented by scos-builder:
// no registry of CoreOS media types defines one. "os: linux" (rather than a
// CoreOS platform name) keeps per-platform selection working in standard
// clients such as skopeo --override-arch.
//
// Input contract: each OUTDIR is one build output directory (what
// `scos-builder build -o OUTDIR` writes for one architecture). It holds
// exactly one stream file <prefix>.json (any *.json that parses as a stream)
// describing exactly one architecture, and the metal ISO it names: the file
// in OUTDIR whose name is the last path element of
// metal.formats.iso.disk.location (so relative and --base-url locations both
// work). The ISO's sha256 must match the stream. Several OUTDIRs must have
// different architectures and merge without conflict (stream.Merge).
//
// Output: everything is first written into an OCI image layout (blobs named
// by digest, index.json tagging the top index), deterministically: tar
// entries sorted with fixed owner, modes and mtime; JSON with sorted keys;
// timestamps from Options.Created (default: the newest last-modified of the
// input streams). Push then copies the layout's index and all its manifests,
// digests unchanged, to a registry with go.podman.io/image.
package publish
