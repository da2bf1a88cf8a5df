import { useEffect } from 'react';

/** Sets the browser tab's title for a page. */
export function useTitle(title: string) {
  useEffect(() => {
    document.title = `${title} · modelplane`;
  }, [title]);
}
