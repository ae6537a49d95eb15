// Package ostree imports ostree container images (the ostree-ext
// "ostree-unverified-registry:" format of Fedora CoreOS, CentOS Stream
// CoreOS, RHCOS and bootc images) and deploys them into a virtual sysroot,
// natively and without root.
//
// Contract:
//   - Import streams the layers (uncompressed, gzip or zstd) once each:
//     the commit layer, the chunk layers up to ostree.final-diffid (tar
//     format v1 or v0), then derived layers, which are folded in as
//     ostree-ext does. Every commit, dirtree, dirmeta and content object
//     checksum is recomputed; a mismatch is an error naming the object and
//     the layer. File contents go to an fstree.Store; memory use does not
//     grow with file sizes.
//     The result holds the bare repository (all imported objects, the
//     merge commit, refs ostree/container/blob/… and
//     ostree/container/image/…) and the merge commit's filesystem as
//     fstree trees sharing file inodes.
//   - Deploy builds the physical sysroot of the merge commit exactly as
//     ostree admin deploy (2022.7) makes a first deployment: boot version
//     1, subboot version 1, deployment and boot serial 0.
//
// Derived content gets SELinux labels without a policy: a file replacing
// a base file keeps that file's label, a new file or directory takes its
// parent directory's label (counted in ImportStats.InheritedLabels).
//
// The object encodings, the layer formats and the deployment layout are
// specified in shared/research/ostree-container-and-deploy.md.
package ostree
