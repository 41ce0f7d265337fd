#!/bin/sh
# signbridge (service tarball): the full CLI (server, admin, daemon, ...) on the Node.js runtime this tarball carries.
# Follows a symlink to itself (e.g. /usr/local/bin/signbridge -> /opt/signbridge/bin/signbridge).
here=$(dirname "$(readlink -f "$0")")
exec "$here/../node/bin/node" "$here/../app/bin/signbridge.js" "$@"
