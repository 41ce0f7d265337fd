#!/bin/sh
# signbridge (service tarball): the full CLI (server, admin, daemon, ...) on the Node.js runtime this tarball carries.
# Follows a symlink to itself (e.g. /usr/local/bin/signbridge -> /opt/signbridge/bin/signbridge).
here=$(dirname "$(readlink -f "$0")")
# V8 sizes the young generation for a machine's memory (semi-spaces up to 64 MB on Node 24): under 256 connections
# that held ~150 MB more resident than 16 MB semi-spaces at about the same rate (docs/benchmarks.md, "Memory under
# sustained load"). A --max-semi-space-size already in NODE_OPTIONS is left as it is.
case " ${NODE_OPTIONS-} " in
*--max-semi-space-size*) ;;
*) NODE_OPTIONS="--max-semi-space-size=16${NODE_OPTIONS:+ $NODE_OPTIONS}" && export NODE_OPTIONS ;;
esac
exec "$here/../node/bin/node" "$here/../app/bin/signbridge.js" "$@"
