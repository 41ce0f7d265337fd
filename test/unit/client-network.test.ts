// Per-address limits count an IPv4 address, or the /64 of an IPv6 address, however it is written.
import { describe, expect, it } from 'vitest';
import { clientNetwork } from '../../src/tsa/client-network.js';

describe('clientNetwork', () => {
  it.each([
    ['192.0.2.7', '192.0.2.7'],
    ['::ffff:192.0.2.7', '192.0.2.7'],
    ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002:ffff:1:2:3', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::192.0.2.1', '64:ff9b:0:0::/64'],
    ['2001:db8:1:2:3:4:192.0.2.1', '2001:db8:1:2::/64'],
  ])('%s counts as %s', (ip, network) => {
    expect(clientNetwork(ip)).toBe(network);
  });
});
