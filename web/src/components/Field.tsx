import { useId, type ReactNode } from 'react';

/** A labelled form control with its hint, a warning and the API's error for it, tied by aria. */
export function Field({
  label,
  hint,
  warning,
  error,
  children,
}: {
  label: string;
  hint?: ReactNode;
  /** Something the user should know before submitting (the form still submits). */
  warning?: ReactNode;
  error?: string;
  children: (props: { id: string; 'aria-describedby'?: string; 'aria-invalid'?: boolean }) => ReactNode;
}) {
  const id = useId();
  const hintId = hint ? `${id}-hint` : undefined;
  const warningId = warning ? `${id}-warning` : undefined;
  const errorId = error ? `${id}-error` : undefined;
  const describedBy = [errorId, warningId, hintId].filter(Boolean).join(' ') || undefined;
  return (
    <div className={`field${error ? ' field-invalid' : ''}`}>
      <label htmlFor={id}>{label}</label>
      {children({ id, 'aria-describedby': describedBy, 'aria-invalid': error ? true : undefined })}
      {hint && (
        <p className="hint" id={hintId}>
          {hint}
        </p>
      )}
      {warning && (
        <p className="field-warning" id={warningId} role="status">
          {warning}
        </p>
      )}
      {error && (
        <p className="field-error" id={errorId} role="alert">
          {error}
        </p>
      )}
    </div>
  );
}
