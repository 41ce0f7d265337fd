/** A pkcs11js call in its callback form (run on libuv's thread pool) as a promise; a null result is an error. */
export function promisify<T>(start: (cb: (err: Error | null, value: T | null) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    start((err, value) =>
      err || value === null ? reject(err ?? new Error('PKCS#11 call returned nothing')) : resolve(value),
    );
  });
}
