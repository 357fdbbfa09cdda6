"""The folder `kaliper trace record -- CMD` puts first on the command's PYTHONPATH: its `sitecustomize`
counts an unmodified script's steps at each optimizer.step(). Nothing else lives here (the folder is a
package only so that installing Kaliper ships it)."""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
