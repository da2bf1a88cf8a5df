import { useState } from 'react';

/** Copies `text` to the clipboard and says so for a moment. */
export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [copied, setCopied] = useState<'yes' | 'failed' | null>(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setCopied('yes');
    } catch {
      setCopied('failed');
    }
    setTimeout(() => setCopied(null), 1500);
  };
  return (
    <button type="button" className="btn btn-small" onClick={copy} aria-label={text.length <= 120 ? `${label}: ${text}` : label}>
      {copied === 'yes' ? 'Copied' : copied === 'failed' ? 'Copy failed' : label}
      <span className="visually-hidden" role="status">
        {copied === 'yes' ? 'Copied to the clipboard' : ''}
      </span>
    </button>
  );
}
