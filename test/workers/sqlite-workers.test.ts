// Request workers on the embedded default (SQLite): worker-scenarios.ts.
import { describeRequestWorkers } from './worker-scenarios.js';

describeRequestWorkers('sqlite');
