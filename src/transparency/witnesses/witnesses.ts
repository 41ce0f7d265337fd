// The log's witnesses (log.witnesses): each checkpoint this instance publishes is offered to every witness's feed
// (witness-feed.ts), and each cosignature is stored with its checkpoint, served from then on by GET
// /log/checkpoint and in every proof against it.
import type { LogStore, StoredCheckpoint } from '../../store/log/log-store.js';
import type { CosignerKey } from '../verify/cosignature.js';
import { WitnessFeed, type WitnessFeedDeps } from './witness-feed.js';
import type { WitnessSettings } from './witness-settings.js';

export interface WitnessesDeps extends Pick<WitnessFeedDeps, 'onProblem' | 'onCosigned' | 'timeoutMs' | 'retryMs'> {
  store: Pick<LogStore, 'addCosignature'>;
  consistency(from: number, to: number): Promise<Buffer[]>;
}

export class Witnesses {
  private readonly feeds: WitnessFeed[];

  constructor(witnesses: readonly WitnessSettings[], deps: WitnessesDeps) {
    const store = async (treeSize: number, line: string, key: CosignerKey) => {
      const prefix = `\u2014 ${key.name} `;
      await deps.store.addCosignature(treeSize, line, (existing) => existing.startsWith(prefix));
    };
    this.feeds = witnesses.map((w) => new WitnessFeed(w, { ...deps, store }));
  }

  /** The witnesses worth waiting for: by key name, those that did not refuse the last checkpoint they were sent. */
  awaited(): string[] {
    return this.feeds.filter((f) => !f.refusing).map((f) => f.name);
  }

  offer(checkpoint: StoredCheckpoint): void {
    for (const feed of this.feeds) feed.offer({ treeSize: checkpoint.treeSize, note: checkpoint.note });
  }

  async stop(): Promise<void> {
    await Promise.all(this.feeds.map((f) => f.stop()));
  }
}
