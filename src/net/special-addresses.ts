// Which IP addresses a request to a URL someone else chose may not reach (SSRF): the service's own host, its
// networks, cloud metadata, and every address whose meaning depends on where it is used. docs/outbound-addresses.md
// lists the ranges and the reasons; test/unit/special-addresses.test.ts walks the IANA registries entry by entry.
//
// The rule:
// - IPv4: every block of the IANA IPv4 Special-Purpose Address Registry, whatever its "Globally Reachable" flag,
//   plus multicast (224/4). The flag is True only for anycast service addresses (PCP, TURN, AS112, AMT) that are
//   answered by the nearest instance, which may be inside the operator's network (PCP's is the local router by
//   design), and none of which is an HTTPS server a webhook or an OIDC issuer could be.
// - IPv6: only global unicast (2000::/3, the one block IANA allocates from) is reachable, less the special blocks
//   inside it (IETF assignments 2001::/23 with Teredo, documentation, 6to4, AS112); everything outside 2000::/3 is
//   refused (loopback, unspecified, IPv4-compatible ::/96, discard 100::/64, SRv6 5f00::/16, unique-local,
//   site-local fec0::/10, link-local, multicast, and the reserved space), so a block added later outside
//   2000::/3 is refused without a change here.
// - An IPv6 address that carries an IPv4 address the host would reach is judged by that IPv4 address: IPv4-mapped
//   ::ffff:0:0/96 (a dual-stack socket connects to the IPv4 address), IPv4-translated ::ffff:0:0:0/96 (SIIT), and
//   the NAT64 well-known prefix 64:ff9b::/96 (on an IPv6-only network with DNS64 every IPv4-only host resolves
//   into it, so it cannot be refused whole; the NAT64 gateway would reach the IPv4 address inside).
// - Refused whole though they carry an IPv4 address: 6to4 2002::/16 (deprecated by RFC 7526; it is reached through
//   whichever relay the network routes 2002::/16 to, and no server is published on it today), Teredo 2001::/32 (a
//   client's tunnel address, never a server's), the local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215: not globally
//   reachable, and where the IPv4 address sits depends on the prefix length the network chose) and IPv4-compatible
//   ::/96 (deprecated by RFC 4291; stacks that still accept it send to the IPv4 address inside, 127.0.0.1 included).
// The operator's allow list (webhooks.allow, workload.allow) is the way to reach any of these on purpose.
import { isIP } from 'node:net';

interface Range {
  /** First address of the block as a number (IPv4: 32 bits, IPv6: 128 bits). */
  base: bigint;
  bits: number;
  name: string;
  cidr: string;
}

/** IANA IPv4 Special-Purpose Address Registry (every entry; overlapping entries are named by the narrower one). */
const SPECIAL_V4: Array<[string, string]> = [
  ['0.0.0.0/32', '"this host on this network"'],
  ['0.0.0.0/8', '"this network"'],
  ['10.0.0.0/8', 'private-use'],
  ['100.64.0.0/10', 'shared address space (carrier-grade NAT)'],
  ['127.0.0.0/8', 'loopback'],
  ['169.254.0.0/16', 'link-local (cloud metadata)'],
  ['172.16.0.0/12', 'private-use'],
  ['192.0.0.0/29', 'IPv4 service continuity prefix (DS-Lite)'],
  ['192.0.0.8/32', 'IPv4 dummy address'],
  ['192.0.0.9/32', 'Port Control Protocol anycast'],
  ['192.0.0.10/32', 'TURN anycast'],
  ['192.0.0.170/31', 'NAT64/DNS64 discovery'],
  ['192.0.0.0/24', 'IETF protocol assignments'],
  ['192.0.2.0/24', 'documentation (TEST-NET-1)'],
  ['192.31.196.0/24', 'AS112-v4'],
  ['192.52.193.0/24', 'AMT'],
  ['192.88.99.0/24', 'deprecated 6to4 relay anycast'],
  ['192.168.0.0/16', 'private-use'],
  ['192.175.48.0/24', 'direct delegation AS112 service'],
  ['198.18.0.0/15', 'benchmarking'],
  ['198.51.100.0/24', 'documentation (TEST-NET-2)'],
  ['203.0.113.0/24', 'documentation (TEST-NET-3)'],
  ['224.0.0.0/4', 'multicast'],
  ['255.255.255.255/32', 'limited broadcast'],
  ['240.0.0.0/4', 'reserved'],
];

/** IPv6 blocks refused (IANA IPv6 Special-Purpose Address Registry and Address Space); outside 2000::/3 see below. */
const SPECIAL_V6: Array<[string, string]> = [
  ['::/128', 'unspecified'],
  ['::1/128', 'loopback'],
  ['::/96', 'IPv4-compatible (deprecated)'],
  ['64:ff9b:1::/48', 'local-use NAT64'],
  ['100::/64', 'discard-only'],
  ['100:0:0:1::/64', 'dummy IPv6 prefix'],
  ['2001::/32', 'Teredo'],
  ['2001:2::/48', 'benchmarking'],
  ['2001:db8::/32', 'documentation'],
  ['2001::/23', 'IETF protocol assignments'],
  ['2002::/16', '6to4'],
  ['2620:4f:8000::/48', 'direct delegation AS112 service'],
  ['3fff::/20', 'documentation'],
  ['5f00::/16', 'segment routing (SRv6) SIDs'],
  ['fc00::/7', 'unique-local (private)'],
  ['fe80::/10', 'link-local'],
  ['fec0::/10', 'site-local (deprecated)'],
  ['ff00::/8', 'multicast'],
];

/** IPv6 blocks whose last 32 bits are the IPv4 address the connection reaches: judged as that address. */
const CARRIES_V4: Array<[string, string]> = [
  ['::ffff:0:0/96', 'IPv4-mapped'],
  ['::ffff:0:0:0/96', 'IPv4-translated'],
  ['64:ff9b::/96', 'NAT64'],
];

const GLOBAL_UNICAST = range('2000::/3', 'global unicast');

const v4Ranges = SPECIAL_V4.map(([cidr, name]) => range(cidr, name));
const v6Ranges = SPECIAL_V6.map(([cidr, name]) => range(cidr, name));
const carriers = CARRIES_V4.map(([cidr, name]) => range(cidr, name));

/**
 * Why `address` (an IP literal: dotted IPv4, or IPv6 in any spelling isIP accepts) may not be reached, as
 * "name (block)", e.g. "loopback (127.0.0.0/8)"; undefined for an address the service may reach.
 */
export function specialUseRange(address: string): string | undefined {
  const family = isIP(address);
  if (family === 4) return v4Reason(v4Value(address));
  if (family !== 6) return 'not an IP address';
  const value = v6Value(address);
  for (const carrier of carriers) {
    if (!contains(carrier, value, 128)) continue;
    const inner = v4Reason(value & 0xffffffffn);
    return inner === undefined ? undefined : `${carrier.name} ${v4Text(value & 0xffffffffn)}, ${inner}`;
  }
  const found = v6Ranges.find((r) => contains(r, value, 128));
  if (found) return `${found.name} (${found.cidr})`;
  if (!contains(GLOBAL_UNICAST, value, 128)) return 'reserved, outside global unicast 2000::/3';
  return undefined;
}

/** Is `address` (an IP literal) loopback, private, link-local or another special-use address? */
export function isSpecialUse(address: string): boolean {
  return specialUseRange(address) !== undefined;
}

function v4Reason(value: bigint): string | undefined {
  const found = v4Ranges.find((r) => contains(r, value, 32));
  return found ? `${found.name} (${found.cidr})` : undefined;
}

function range(cidr: string, name: string): Range {
  const [address, bits] = cidr.split('/') as [string, string];
  return { base: isIP(address) === 4 ? v4Value(address) : v6Value(address), bits: Number(bits), name, cidr };
}

function contains(r: Range, value: bigint, width: number): boolean {
  const shift = BigInt(width - r.bits);
  return value >> shift === r.base >> shift;
}

function v4Value(address: string): bigint {
  return address.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

/** The 128-bit value of an IPv6 literal isIP accepted (zero compression, a dotted IPv4 tail, a %zone). */
function v6Value(address: string): bigint {
  let text = (address.split('%')[0] as string).toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const v4 = v4Value(dotted[1] as string);
    text = `${text.slice(0, dotted.index)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = tail === undefined ? [] : Array(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...zeros, ...tailGroups].reduce((acc, group) => (acc << 16n) | BigInt(`0x${group}`), 0n);
}

function v4Text(value: bigint): string {
  return [24n, 16n, 8n, 0n].map((shift) => Number((value >> shift) & 255n)).join('.');
}
