// The client packages' program: the bundle (packaging/client/bundle.mjs) starts here.
import { runClient } from '../../src/cli/client-main.js';

runClient();
