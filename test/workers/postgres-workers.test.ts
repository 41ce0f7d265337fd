// Request workers on PostgreSQL (each worker an ordinary client of the database): worker-scenarios.ts.
import { describeRequestWorkers } from './worker-scenarios.js';

describeRequestWorkers('postgres');
