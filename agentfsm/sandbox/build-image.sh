#!/usr/bin/env bash
# Build the local sandbox image without any image registry: a minimal Debian root made with
# debootstrap (python3-minimal, coreutils' `timeout`, util-linux's `setsid`, procps), imported
# with `docker import`. `agentfsm sandbox build` runs it (it ships in the package); the tests and
# CI run it through tools/build-sandbox-image. Users may point [sandbox] image at any image with Python.
#
#   build-image.sh           build it unless it exists (cached), print the name
#   build-image.sh --force   rebuild it
#   build-image.sh --name    print the image name and exit (the tests read it from here)
#
# The Debian mirror is the one this machine's apt already uses (read from its sources at run
# time), so the script works wherever `apt-get install` does. Needs root (debootstrap), docker.
set -euo pipefail

IMAGE="${AGENTFSM_TEST_IMAGE:-agentfsm-sandbox:bookworm}"
SUITE=bookworm
PACKAGES=python3-minimal,procps

case "${1:-}" in
    --name) echo "$IMAGE"; exit 0 ;;
    --force) force=1 ;;
    "") force=0 ;;
    *) echo "usage: agentfsm sandbox build [--name|--force]" >&2; exit 2 ;;
esac

if [ "$force" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE (exists; --force rebuilds it)"
    exit 0
fi

mirror() {
    # First Debian archive apt uses (deb822 `URIs:` lines, then one-line sources), security excluded.
    local uri
    uri=$( { grep -hsi '^URIs:' /etc/apt/sources.list.d/*.sources | sed 's/^URIs:[[:space:]]*//I' | tr ' ' '\n'
             grep -hs '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
                 | sed 's/\[[^]]*\]//' | awk '{print $2}'; } \
           | grep -v -e '^$' -e 'security' | head -n1 )
    if [ -z "$uri" ]; then
        echo "no Debian mirror found in /etc/apt/sources.list{,.d/*}: configure apt, or set DEBIAN_MIRROR" >&2
        exit 1
    fi
    echo "$uri"
}

for tool in debootstrap docker; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install debootstrap docker.io" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "debootstrap needs root: run it as root (sudo agentfsm sandbox build)" >&2; exit 1; }

MIRROR="${DEBIAN_MIRROR:-$(mirror)}"
root=$(mktemp -d /tmp/agentfsm-image-root.XXXXXX)
trap 'rm -rf "$root"' EXIT

start=$(date +%s)
echo "debootstrap $SUITE (minbase + $PACKAGES) into $root" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1 \
    || { tail -n 30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

# `python` as well as `python3`, like the python images; an empty workspace owned by the
# sandbox's default user (nobody) and writable by its group (the bash tool's user is another uid in
# it), setgid so what either makes stays in the group: a fresh volume mounted there inherits all that.
ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
install -d -m 2775 -o 65534 -g 65534 "$root/workspace"
echo 'shell:x:65533:65534:the bash tool of agentfsm:/nonexistent:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'shell:*:20000:0:99999:7:::' >>"$root/etc/shadow"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
       "$root"/usr/share/man/* "$root"/usr/share/locale/*

tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'WORKDIR /workspace' \
    --change 'CMD ["sleep", "infinity"]' \
    --change 'LABEL agentfsm.image=sandbox' \
    - "$IMAGE" >/dev/null
echo "$IMAGE built in $(( $(date +%s) - start )) s" >&2
echo "$IMAGE"
