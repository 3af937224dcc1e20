"""Object storage: run directories, artifacts and model versions on `s3://` and `gs://` URLs.

One file-system layer (pyarrow.fs: Arrow's C++ S3 and GCS clients) behind every path Baton
takes, and the commit protocol that gives object stores the guarantees `rename` gives a local
disk: an artifact or a model version is visible only once a small object written last (a
manifest of its files and their content hashes) says it is complete. docs/artifacts.md
describes the layout and the guarantees.

Modules, one concept each: `location` (a local path or a bucket URL, parsed and joined in one
place), `filesystems` (the URL's file system, credentials and endpoint, errors named by URL),
`objects` (reading, writing, listing, deleting), `manifest` (content hashes of a directory),
`node_cache` (the node-local content-addressed cache and mirrors), `trees` (a directory
uploaded or downloaded by manifest), `model_versions` (TF Serving's `<base>/<version>/` on a
bucket), `wait` (`python -m baton.storage.wait`: a pod's gate on commit objects), `testing`
(SeaweedFS's S3 and fake-gcs-server on 127.0.0.1 for tests and benchmarks).
"""
