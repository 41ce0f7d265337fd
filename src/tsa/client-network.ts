// The client a per-address limit counts. An IPv6 subscriber gets at least a /64 (RFC 6177), so counting single
// IPv6 addresses would let one client take a fresh address for every query: IPv6 is counted by its /64, IPv4 (and
// IPv4-mapped IPv6) by its address.
import { unmapped } from '../net/outbound-request.js';

/** `192.0.2.7`, or `2001:db8:1:2::/64` for any address in that /64. */
export function clientNetwork(ip: string): string {
  const { address, type } = unmapped(ip);
  if (type !== 'ipv6') return address;
  const [head = '', tail] = address.replace(/%.*$/, '').toLowerCase().split('::');
  const groups = (part: string | undefined) =>
    (part ? part.split(':') : []).flatMap((g) => (g.includes('.') ? ['0', '0'] : [g])); // a dotted end is the low 32 bits
  const front = groups(head);
  const back = groups(tail);
  const all =
    tail === undefined ? front : [...front, ...Array(Math.max(0, 8 - front.length - back.length)).fill('0'), ...back];
  const prefix = all.slice(0, 4).map((g) => Number.parseInt(g || '0', 16).toString(16));
  return `${prefix.join(':')}::/64`;
}
