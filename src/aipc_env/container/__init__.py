"""The training env as an OCI image (environment side): render a build context from a lock (render), fill its
wheelhouse with hash-checked wheels (wheelhouse), drive podman/buildah/docker (engine), build and check images
against a lock (build). The doctor recognises when it runs inside such a container."""
