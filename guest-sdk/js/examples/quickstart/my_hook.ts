import { Action, defineHook, log } from 'colloquy-hook';

export const { start, message, timeout } = defineHook({
  // A conversation starts: remember when.
  onStart(event) {
    return [Action.setVar('opened_at', event.now)];
  },

  // A message arrives: refuse requests over the template's limit.
  onMessage(event) {
    if (event.message?.performative !== 'request') return [];
    const limit = event.configU64('max_amount') ?? 1000;
    const amount = event.contentU64('amount') ?? 0;
    if (amount > limit) {
      return [Action.reject(`amount ${amount} is over the limit of ${limit}`)];
    }
    log('info', `request for ${amount} accepted`);
    return [Action.setVar('last_amount', amount)];
  },
});
