#!/bin/sh
# build.sh LAYOUT [ARCHIVE]: build Sluice's container image, FROM scratch and
# without a container engine, into the OCI image layout LAYOUT (tags
# $VERSION and latest) and, if ARCHIVE is given, a docker-archive of it
# that `podman load` and `docker load` read. `make image` runs it from the
# repository's root with VERSION, COMMIT and LDFLAGS; see
# docs/operations.md, "Container image".
#
# The image holds one layer: the static binary /sluice, /bin/ratelimit, a
# link to it (run by that name, envoyproxy/ratelimit's, sluice is `sluice
# serve --envoy-compat`: a Deployment of the reference that runs
# /bin/ratelimit needs only this image; docs/envoy.md), /etc/passwd and
# /etc/group naming the user sluice (65532), Debian's CA certificates (for
# DynamoDB over HTTPS), an empty /tmp, and /data, the pebble store's volume,
# owned by sluice, also the working directory (where a relative --data-dir
# is: ratelimit's default ./sluice-data). No shell, no libc. The layer is
# written by GNU tar with sorted names, numeric owners and the commit's
# time, so that one commit builds the same layer; umoci makes the image of
# it (it needs no root), and skopeo the archive.
set -eu

layout=${1:?usage: build.sh LAYOUT [ARCHIVE]}
archive=${2:-}
GO=${GO:-go}
VERSION=${VERSION:-dev}
COMMIT=${COMMIT:-}
LDFLAGS=${LDFLAGS:-}
SOURCE=${SOURCE:-https://github.com/sluicehq/sluice}
GOARCH=${GOARCH:-$($GO env GOARCH)}
uid=65532

for tool in umoci tar ${archive:+skopeo}; do
	command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing: run make deps" >&2; exit 1; }
done
# A tag allows letters, digits, '_', '.' and '-' (git describe's output does).
tag=$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9_.-' '-' | cut -c1-128)
# The commit's time, for every file and date of the image; now outside git.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/data" "$root/bin"

CGO_ENABLED=0 GOOS=linux GOARCH=$GOARCH $GO build -trimpath -ldflags "$LDFLAGS -s -w" -o "$root/sluice" ./cmd/sluice
printf 'root:x:0:0:root:/:/sbin/nologin\nsluice:x:%d:%d:sluice:/data:/sbin/nologin\n' $uid $uid >"$root/etc/passwd"
printf 'root:x:0:\nsluice:x:%d:\n' $uid >"$root/etc/group"
ln -s /sluice "$root/bin/ratelimit"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
chmod 0755 "$root/sluice" "$root/bin" "$root/etc" "$root/etc/ssl" "$root/etc/ssl/certs"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$root/tmp"
chmod 0750 "$root/data"

set -- --sort=name --mtime="@$epoch" --numeric-owner --format=gnu -C "$root"
tar --create --file "$work/layer.tar" --owner=0 --group=0 "$@" sluice bin etc tmp
tar --append --file "$work/layer.tar" --owner=$uid --group=$uid "$@" data

rm -rf "$layout"
mkdir -p "$(dirname "$layout")"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci raw add-layer --image "$layout:$tag" --history.created "$created" \
	--history.created_by "deploy/image/build.sh: sluice $VERSION ($COMMIT)" "$work/layer.tar"
umoci config --image "$layout:$tag" --no-history --created "$created" \
	--architecture "$GOARCH" --os linux \
	--config.user "$uid:$uid" \
	--config.entrypoint /sluice \
	--config.workingdir /data \
	--config.cmd serve --config.cmd --addr --config.cmd :8080 --config.cmd --data-dir --config.cmd /data \
	--config.volume /data \
	--config.exposedports 8080/tcp --config.exposedports 8081/tcp \
	--config.stopsignal SIGTERM \
	--config.label "org.opencontainers.image.title=sluice" \
	--config.label "org.opencontainers.image.description=Sluice, a multi-tenant rate limiter" \
	--config.label "org.opencontainers.image.version=$VERSION" \
	--config.label "org.opencontainers.image.revision=$COMMIT" \
	--config.label "org.opencontainers.image.source=$SOURCE" \
	--config.label "org.opencontainers.image.created=$created" \
	--manifest.annotation "org.opencontainers.image.version=$VERSION" \
	--manifest.annotation "org.opencontainers.image.revision=$COMMIT" \
	--manifest.annotation "org.opencontainers.image.source=$SOURCE"
if [ "$tag" != latest ]; then
	umoci tag --image "$layout:$tag" latest
fi
umoci gc --layout "$layout"
echo "image: $layout:$tag (and :latest)"

if [ -n "$archive" ]; then
	rm -f "$archive"
	# Both ends are files made here: no registry's signature to check.
	skopeo --insecure-policy copy --quiet "oci:$layout:$tag" "docker-archive:$archive:sluice:$tag"
	echo "archive: $archive, sluice:$tag (podman load -i $archive; docker load -i $archive)"
fi
