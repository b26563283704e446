#!/usr/bin/env bash
# Writes a minimal busybox userland into DIR (from Debian's busybox-static; no network).
set -euo pipefail
dir=${1:?usage: make-busybox-rootfs.sh DIR}
mkdir -p "$dir"/{bin,sbin,etc,tmp,root,proc,dev,sys,usr/bin}
chmod 1777 "$dir/tmp"
cp /bin/busybox "$dir/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$dir/bin/$applet"
done
echo 'root:x:0:0:root:/root:/bin/sh' > "$dir/etc/passwd"
echo 'root:x:0:' > "$dir/etc/group"
