// Stands in for daemon/upstream/in-process-upstream.ts in the client bundle (packaging/client/bundle.mjs): signing
// in the daemon's own process needs the service's key stores and database, which the build-host packages do not
// carry. `signbridge daemon --in-process` says so instead of failing on a missing module.
export const InProcessUpstream = {
  open(): never {
    throw new Error(
      'this signbridge client package has no in-process mode (it carries no key store or database): ' +
        'point the daemon at a service (--service-url, or `signbridge login`), or run it from a checkout ' +
        'or the service package',
    );
  },
};
