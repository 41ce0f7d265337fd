// The rule engine's SbomScanner seam, backed by parseSbom and a VulnerabilityIndex. Every reason an SBOM cannot
// be checked (bad document, component without a usable version) becomes SbomRejected, which the engine answers
// as invalid_sbom.
import { SbomRejected, type SbomScanner, type VulnerabilityMatch } from '../rules-engine.js';
import { parseSbom, SbomError } from '../sbom/parse-sbom.js';
import { type VulnerabilityIndex, VulnMatchError } from './match.js';

export class OsvSbomScanner implements SbomScanner {
  constructor(private readonly index: VulnerabilityIndex) {}

  scan(sbom: string): VulnerabilityMatch[] {
    try {
      return parseSbom(sbom).components.flatMap((component) =>
        this.index.findVulnerabilities(component).map((m) => {
          const version = component.purl?.version ?? component.version;
          // The package URL names the component unambiguously (group, namespace); qualifiers are noise here.
          const purl = component.purl;
          const named = purl
            ? `pkg:${purl.type}/${purl.namespace ? `${purl.namespace}/` : ''}${purl.name}${version === undefined ? '' : `@${version}`}`
            : version === undefined
              ? component.name
              : `${component.name}@${version}`;
          const match: VulnerabilityMatch = { vulnId: m.vulnId, severity: m.severity, component: named };
          if (m.fixVersion !== undefined) match.fixVersion = m.fixVersion;
          return match;
        }),
      );
    } catch (err) {
      if (err instanceof SbomError || err instanceof VulnMatchError) throw new SbomRejected(err.message);
      throw err;
    }
  }
}
