// Which addresses a request to a URL someone else chose may not reach (src/net/special-addresses.ts), entry by entry
// through the IANA IPv4 and IPv6 Special-Purpose Address Registries (as of their 2025 editions), the blocks outside
// them that the rule also refuses, and the other spellings of the same addresses. Each row names the block, its
// registry "Globally Reachable" value, addresses inside (the first and last where the block is wider than one) and,
// where the neighbours are ordinary unicast, the addresses just outside, which must stay reachable.
import { describe, expect, it } from 'vitest';
import { DestinationRefused, OutboundPolicy, type Resolver } from '../../src/net/outbound-request.js';
import { isSpecialUse, specialUseRange } from '../../src/net/special-addresses.js';

interface Row {
  block: string;
  /** The registry's "Globally Reachable" value; '-' for blocks not in the special-purpose registries. */
  reachable: 'False' | 'True' | 'N/A' | '-';
  inside: string[];
  outside: string[];
  /** Inside the block but reachable: the embedded IPv4 address is public. */
  passes: string[];
}

/**
 * The rows of a table written as the registries print theirs, a line a block: `block | reachable | inside |
 * outside | passes`, addresses separated by spaces, the last two columns optional; `#` starts a comment line.
 */
function registryRows(text: string): Row[] {
  const addresses = (column: string | undefined) => (column ?? '').split(' ').filter((a) => a !== '');
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const [block, reachable, inside, outside, passes, ...extra] = line.split('|').map((column) => column.trim());
      if (!block || !['False', 'True', 'N/A', '-'].includes(reachable ?? '') || !inside || extra.length > 0) {
        throw new Error(`not a row: ${line}`);
      }
      return {
        block,
        reachable: reachable as Row['reachable'],
        inside: addresses(inside),
        outside: addresses(outside),
        passes: addresses(passes),
      };
    });
}

// "True" and "N/A" rows are refused as well (the decision in special-addresses.ts and docs/outbound-addresses.md):
// anycast service addresses answered by the nearest instance, tunnels and identifiers, none an HTTPS server.
const IPV4 = registryRows(`
0.0.0.0/8          | False | 0.0.0.0 0.1.2.3 0.255.255.255 | 1.0.0.0
0.0.0.0/32         | False | 0.0.0.0
10.0.0.0/8         | False | 10.0.0.0 10.1.2.3 10.255.255.255 | 9.255.255.255 11.0.0.0
100.64.0.0/10      | False | 100.64.0.0 100.100.100.200 100.127.255.255 | 100.63.255.255 100.128.0.0
127.0.0.0/8        | False | 127.0.0.0 127.0.0.1 127.255.255.255 | 126.255.255.255 128.0.0.0
169.254.0.0/16     | False | 169.254.0.0 169.254.169.254 169.254.170.2 169.254.255.255 | 169.253.255.255 169.255.0.0
172.16.0.0/12      | False | 172.16.0.0 172.20.1.1 172.31.255.255 | 172.15.255.255 172.32.0.0
192.0.0.0/24       | False | 192.0.0.0 192.0.0.100 192.0.0.255 | 191.255.255.255 192.0.1.0
192.0.0.0/29       | False | 192.0.0.1 192.0.0.7
192.0.0.8/32       | False | 192.0.0.8
192.0.0.9/32       | True  | 192.0.0.9
192.0.0.10/32      | True  | 192.0.0.10
192.0.0.170/32     | False | 192.0.0.170
192.0.0.171/32     | False | 192.0.0.171
192.0.2.0/24       | False | 192.0.2.0 192.0.2.1 192.0.2.255 | 192.0.1.255 192.0.3.0
192.31.196.0/24    | True  | 192.31.196.0 192.31.196.255 | 192.31.195.255 192.31.197.0
192.52.193.0/24    | True  | 192.52.193.0 192.52.193.255 | 192.52.192.255 192.52.194.0
192.88.99.0/24     | N/A   | 192.88.99.0 192.88.99.1 192.88.99.255 | 192.88.98.255 192.88.100.0
192.168.0.0/16     | False | 192.168.0.0 192.168.1.1 192.168.255.255 | 192.167.255.255 192.169.0.0
192.175.48.0/24    | True  | 192.175.48.0 192.175.48.255 | 192.175.47.255 192.175.49.0
198.18.0.0/15      | False | 198.18.0.0 198.19.255.255 | 198.17.255.255 198.20.0.0
198.51.100.0/24    | False | 198.51.100.0 198.51.100.255 | 198.51.99.255 198.51.101.0
203.0.113.0/24     | False | 203.0.113.0 203.0.113.255 | 203.0.112.255 203.0.114.0
240.0.0.0/4        | False | 240.0.0.0 250.1.2.3 255.255.255.254
255.255.255.255/32 | False | 255.255.255.255
# Not in the special-purpose registry (IANA's multicast registry): refused, a request is unicast.
224.0.0.0/4        | -     | 224.0.0.0 224.0.0.1 239.255.255.255 | 223.255.255.255
`);

const IPV6 = registryRows(`
# ::2 and ::fffe:ffff:ffff next to these are refused too (IPv4-compatible, reserved): no reachable neighbour.
::1/128                           | False | ::1
::/128                            | False | ::
::ffff:0:0/96                     | False | ::ffff:0.0.0.0 ::ffff:127.0.0.1 ::ffff:a9fe:a9fe ::ffff:10.0.0.1 ::ffff:255.255.255.255 | | ::ffff:1.0.0.0 ::ffff:8.8.8.8 ::ffff:808:808
# The well-known NAT64 prefix: judged by the IPv4 address inside (DNS64 puts every IPv4-only host here).
64:ff9b::/96                      | True  | 64:ff9b:: 64:ff9b::7f00:1 64:ff9b::169.254.169.254 64:ff9b::a00:1 64:ff9b::ffff:ffff | | 64:ff9b::808:808 64:ff9b::1.1.1.1
64:ff9b:1::/48                    | False | 64:ff9b:1:: 64:ff9b:1::808:808 64:ff9b:1:ffff:ffff:ffff:ffff:ffff
100::/64                          | False | 100:: 100::1 100::ffff:ffff:ffff:ffff
100:0:0:1::/64                    | False | 100:0:0:1:: 100:0:0:1:ffff:ffff:ffff:ffff
2001::/23                         | False | 2001:: 2001:100::1 2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff | 2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff 2001:200::
2001::/32                         | N/A   | 2001:: 2001:0:4136:e378:8000:63bf:3fff:fdd2 2001:0:ffff:ffff:ffff:ffff:ffff:ffff
2001:1::1/128                     | True  | 2001:1::1
2001:1::2/128                     | True  | 2001:1::2
2001:1::3/128                     | True  | 2001:1::3
2001:2::/48                       | False | 2001:2:: 2001:2:0:ffff:ffff:ffff:ffff:ffff
2001:3::/32                       | True  | 2001:3:: 2001:3:ffff:ffff:ffff:ffff:ffff:ffff
2001:4:112::/48                   | True  | 2001:4:112:: 2001:4:112:ffff:ffff:ffff:ffff:ffff
2001:10::/28                      | N/A   | 2001:10:: 2001:1f:ffff:ffff:ffff:ffff:ffff:ffff
2001:20::/28                      | True  | 2001:20:: 2001:2f:ffff:ffff:ffff:ffff:ffff:ffff
2001:30::/28                      | True  | 2001:30:: 2001:3f:ffff:ffff:ffff:ffff:ffff:ffff
2001:db8::/32                     | False | 2001:db8:: 2001:db8::1 2001:db8:ffff:ffff:ffff:ffff:ffff:ffff | 2001:db7:ffff:ffff:ffff:ffff:ffff:ffff 2001:db9::
# Refused whatever IPv4 address it carries (6to4 is deprecated; the relay is whichever the network routes to).
2002::/16                         | N/A   | 2002:: 2002:7f00:1::1 2002:808:808::1 2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff | 2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff 2003::
2620:4f:8000::/48                 | True  | 2620:4f:8000:: 2620:4f:8000:ffff:ffff:ffff:ffff:ffff | 2620:4f:7fff:ffff:ffff:ffff:ffff:ffff 2620:4f:8001::
3fff::/20                         | False | 3fff:: 3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff | 3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff 3fff:1000::
5f00::/16                         | False | 5f00:: 5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff
fc00::/7                          | False | fc00:: fd00:ec2::254 fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff
fe80::/10                         | False | fe80:: fe80::1 febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff
# Not in the special-purpose registry: deprecated or embedding forms, multicast, and everything outside 2000::/3.
::/96 (IPv4-compatible)           | -     | ::2 ::127.0.0.1 ::7f00:1 ::8.8.8.8 ::ffff:ffff
::ffff:0:0:0/96 (IPv4-translated) | -     | ::ffff:0:127.0.0.1 ::ffff:0:a9fe:a9fe ::ffff:0:0:0 | | ::ffff:0:8.8.8.8
fec0::/10 (site-local)            | -     | fec0:: fec0::1 feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff
ff00::/8 (multicast)              | -     | ff00:: ff02::1 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff
outside 2000::/3                  | -     | 1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 4000:: 1000::1 e000::1 fe00:: fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff | 2000:: 3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff
`);

const PUBLIC = ['8.8.8.8', '1.1.1.1', '93.184.215.14', '2606:4700:4700::1111', '2a00:1450:4001:80b::200e'];

describe.each([
  ['IPv4', IPV4],
  ['IPv6', IPV6],
])('the %s special-purpose blocks', (_family, rows) => {
  it.each(
    rows.map((row) => [row.block, row.reachable, row] as const),
  )('%s (globally reachable: %s)', (_block, _reachable, row) => {
    for (const address of row.inside) expect(specialUseRange(address), `${address} refused`).toBeDefined();
    for (const address of [...row.outside, ...row.passes]) {
      expect(specialUseRange(address), `${address} reachable`).toBeUndefined();
    }
  });
});

describe('addresses the service reaches', () => {
  it.each(PUBLIC)('%s', (address) => expect(isSpecialUse(address)).toBe(false));
});

describe('other spellings of the same address', () => {
  it.each([
    '::FFFF:127.0.0.1',
    '::ffff:7F00:1',
    '0:0:0:0:0:ffff:7f00:1',
    '0000:0000:0000:0000:0000:FFFF:127.0.0.1',
    '::127.0.0.1',
    '0:0:0:0:0:0:127.0.0.1',
    '0:0:0:0:0:0:0:1',
    'FEC0::1',
    'fec0:0:0:0:0:0:0:1',
    '2001:0000:4136:E378:8000:63BF:3FFF:FDD2',
    '64:FF9B::127.0.0.1',
    '::ffff:0:127.0.0.1',
    '2002:7F00:0001::',
    'FE80::1%eth0',
  ])('%s is refused', (address) => {
    expect(isSpecialUse(address)).toBe(true);
  });

  // The URL parser turns every IPv4 spelling into dotted decimal and every IPv6 one into its shortest form; the
  // check sees what the connection would use.
  const literalOnly = new OutboundPolicy({
    allow: [],
    resolve: async (host) => {
      throw Object.assign(new Error(`${host} was looked up`), { code: 'ENOTFOUND' });
    },
  });
  it.each([
    ['https://2130706433/', '127.0.0.1'],
    ['https://0x7f000001/', '127.0.0.1'],
    ['https://0177.0.0.1/', '127.0.0.1'],
    ['https://0x7f.0.0.1/', '127.0.0.1'],
    ['https://127.1/', '127.0.0.1'],
    ['https://017700000001/', '127.0.0.1'],
    ['https://0xa9.0xfe.0xa9.0xfe/', '169.254.169.254'],
    ['https://169.254.43518/', '169.254.169.254'],
    ['https://[::ffff:127.0.0.1]/', '::ffff:7f00:1'],
    ['https://[::FFFF:169.254.169.254]/', '::ffff:a9fe:a9fe'],
    ['https://[::127.0.0.1]/', '::7f00:1'],
    ['https://[0:0:0:0:0:0:0:1]/', '::1'],
    ['https://[FEC0::1]/', 'fec0::1'],
    ['https://[fec0::1]/', 'fec0::1'],
    ['https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/', '2001:0:4136:e378:8000:63bf:3fff:fdd2'],
    ['https://[64:ff9b::127.0.0.1]/', '64:ff9b::7f00:1'],
    ['https://[::ffff:0:127.0.0.1]/', '::ffff:0:7f00:1'],
    ['https://[2002:a9fe:a9fe::]/', '2002:a9fe:a9fe::'],
  ])('%s is refused as %s', async (url, address) => {
    const err = await literalOnly.checkUrl(url).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DestinationRefused);
    expect((err as DestinationRefused).reason).toBe('special-use');
    expect((err as DestinationRefused).address).toBe(address);
    expect((err as DestinationRefused).range).toBeTruthy();
  });

  it('names the range and, for an embedded IPv4 address, what it is', () => {
    expect(specialUseRange('::ffff:127.0.0.1')).toBe('IPv4-mapped 127.0.0.1, loopback (127.0.0.0/8)');
    expect(specialUseRange('64:ff9b::a9fe:a9fe')).toBe(
      'NAT64 169.254.169.254, link-local (cloud metadata) (169.254.0.0/16)',
    );
    expect(specialUseRange('::7f00:1')).toBe('IPv4-compatible (deprecated) (::/96)');
    expect(specialUseRange('2001::1')).toBe('Teredo (2001::/32)');
    expect(specialUseRange('not an address')).toBe('not an IP address');
  });
});

describe("the operator's allow list still reaches them", () => {
  const internal: Resolver = async () => [{ address: '2001:0:4136:e378:8000:63bf:3fff:fdd2', family: 6 }];
  it.each([
    ['fec0::/10', 'https://[fec0::1]/'],
    ['::/96', 'https://[::127.0.0.1]/'],
    ['2001::/32', 'https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/'],
    ['2002::/16', 'https://[2002:808:808::1]/'],
    ['hooks.internal', 'https://hooks.internal/'],
  ])('allow %s: %s', async (allow, url) => {
    const policy = new OutboundPolicy({ allow: [allow], resolve: internal });
    await expect(policy.checkUrl(url)).resolves.toMatchObject({ listed: true });
    await expect(new OutboundPolicy({ allow: [], resolve: internal }).checkUrl(url)).rejects.toBeInstanceOf(
      DestinationRefused,
    );
  });
});
