import { useEffect, useRef, type ReactNode } from 'react';

/** A modal confirmation (`<dialog>`: focus moves in, Escape cancels, focus returns after). */
export function Confirm({
  title,
  confirm,
  danger,
  disabled,
  onConfirm,
  onCancel,
  children,
}: {
  title: string;
  confirm: string;
  danger?: boolean;
  disabled?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
  children?: ReactNode;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    const opener = document.activeElement as HTMLElement | null;
    if (dialog && !dialog.open) dialog.showModal?.();
    return () => opener?.focus?.();
  }, []);
  return (
    <dialog
      ref={ref}
      aria-labelledby="confirm-title"
      onCancel={(e) => {
        e.preventDefault();
        onCancel();
      }}
    >
      <form
        method="dialog"
        onSubmit={(e) => {
          e.preventDefault();
          if (!disabled) onConfirm();
        }}
      >
        <h2 id="confirm-title">{title}</h2>
        {children}
        <div className="actions-row">
          <button type="submit" className={`btn ${danger ? 'btn-danger' : 'btn-primary'}`} disabled={disabled}>
            {confirm}
          </button>
          <button type="button" className="btn" onClick={onCancel}>
            Cancel
          </button>
        </div>
      </form>
    </dialog>
  );
}
