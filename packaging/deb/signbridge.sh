#!/bin/sh
# signbridge (package signbridge-client): the client commands on the Node.js runtime the package carries.
exec /usr/lib/signbridge-client/node /usr/lib/signbridge-client/signbridge.mjs "$@"
