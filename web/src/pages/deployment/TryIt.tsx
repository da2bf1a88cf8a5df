import { useState, type FormEvent } from 'react';
import { useMutation } from '@tanstack/react-query';
import type { Deployment } from '../../api/client';
import { ErrorState } from '../../components/States';
import { sendChat } from './chat';

/** Sends one chat message to the model (through modelplane) and shows the answer. */
export function TryIt({ deployment }: { deployment: Deployment }) {
  const model = deployment.spec.model.servedName ?? deployment.name;
  const [message, setMessage] = useState('Hello! Who are you?');
  const chat = useMutation({
    mutationFn: (content: string) => sendChat(deployment.project, deployment.name, model, content),
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (message.trim()) chat.mutate(message.trim());
  };
  const ready = deployment.status.endpoints.external.length > 0 || !!deployment.status.endpoints.cluster;
  return (
    <section className="card" aria-labelledby="tryit-title">
      <h2 id="tryit-title">Try it</h2>
      <form onSubmit={submit} className="tryit">
        <div className="field">
          <label htmlFor="tryit-message">Message</label>
          <textarea id="tryit-message" rows={2} value={message} onChange={(e) => setMessage(e.target.value)} />
          <p className="hint">
            Sent as one chat completion to <code>{model}</code> through modelplane, which checks your role.
          </p>
        </div>
        <button type="submit" className="btn btn-primary" disabled={chat.isPending || !ready}>
          {chat.isPending ? 'Waiting for the model…' : 'Send'}
        </button>
        {!ready && <p className="muted">Available once the deployment has an endpoint.</p>}
      </form>
      <div role="region" aria-label="Answer" aria-live="polite" className="answer">
        {chat.data && (
          <>
            <p className="answer-text">{chat.data.text}</p>
            <p className="hint">
              {chat.data.model && <>model {chat.data.model}</>}
              {chat.data.tokens !== undefined && <> · {chat.data.tokens} tokens</>}
            </p>
          </>
        )}
      </div>
      {chat.error && <ErrorState error={chat.error} />}
    </section>
  );
}
