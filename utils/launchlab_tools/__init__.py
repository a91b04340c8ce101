"""launchlab_tools: what maintainers run, never what a notebook imports.

labs (labs/ from solutions/), start_page (START_HERE and the README's syllabus), site_toc, slides, figures (every
figure across GPUs), guide (the instructor's guide), grade (a class's labs, headless), reference_run (the GPU
tier's notebooks and reports/gpu/), notebooks (reading notebooks: tags, hashes, CUDA sources) and pytest_plugin
(the test tiers). Each reads the chapters' facts from the course model, `launchlab.course`.
"""
